// For role actors: submit a request to the batcher and hear only about a refusal (the events of
// an accepted request come as (event_atom, frame) messages). Include from .cpp files only.
#pragma once

#include <caf/all.hpp>
#include <string>

#include "actors/atoms.h"
#include "actors/codec.h"

namespace chorus {

// Submits `r` to the batcher; on refusal calls `failed` with the reason.
template <class Self, class Fail>
void submit(Self* self, const caf::actor& batcher, const Request& r, Fail failed) {
  self->request(batcher, caf::infinite, frame_atom::value, encode_request(0, r))
      .then(
          [=](const std::vector<uint8_t>& reply) {
            auto rep = decode_reply(reply);
            if (!rep || rep->kind != "Submitted") failed(rep ? rep->text : rep.error().message);
          },
          [=](caf::error& e) { failed(caf::to_string(e)); });
}

}  // namespace chorus
