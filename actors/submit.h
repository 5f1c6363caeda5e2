// Talking to the batcher. For role actors: submit a request and hear only about a refusal (the
// events of an accepted request come as (event_atom, frame) messages). For code that waits (a
// scoped_actor): ask() a command and get its reply. Include from .cpp files only.
#pragma once

#include <caf/all.hpp>
#include <string>

#include "actors/atoms.h"
#include "net/codec.h"

namespace chorus {

// Submits `r` to the batcher; on refusal calls `failed` with the reason.
template <class Self, class Fail>
void submit(Self* self, const caf::actor& batcher, const Request& r, Fail failed) {
  self->request(batcher, caf::infinite, frame_atom::value, encode_request(0, r))
      .then(
          [=](const std::vector<uint8_t>& reply) {
            auto rep = decode_reply(reply);
            if (!rep || rep->kind != ReplyKind::submitted) failed(rep ? rep->text : rep.error().message);
          },
          [=](caf::error& e) { failed(caf::to_string(e)); });
}

// Sends a command frame to the batcher and waits for the reply, decoded; an Error reply, or no
// reply within `timeout`, is an error. `self`: a caf::scoped_actor, or a blocking actor.
template <class Self, class Timeout = caf::infinite_t>
Result<Reply> ask(Self&& self, const caf::actor& batcher, const Frame& f, Timeout timeout = caf::infinite) {
  Result<Reply> out = make_error(Errc::internal, "no reply from the batcher");
  self->request(batcher, timeout, frame_atom::value, f)
      .receive([&](const std::vector<uint8_t>& r) { out = decode_reply(r); },
               [&](caf::error& e) { out = make_error(Errc::internal, caf::to_string(e)); });
  if (out && out->kind == ReplyKind::error) return make_error(out->code, out->text);
  return out;
}

}  // namespace chorus
