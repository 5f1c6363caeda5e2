#include "actors/roles.h"

#include <caf/all.hpp>
#include <deque>

#include "actors/atoms.h"
#include "actors/codec.h"

namespace chorus {
namespace {

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

struct ThinkerState {
  std::string pending;  // text since the last announced piece
};

caf::behavior thinker(caf::stateful_actor<ThinkerState>* self, caf::actor batcher, ThinkerConfig cfg) {
  auto finish = [=] {
    if (!self->state.pending.empty())
      for (const auto& s : cfg.subscribers) self->send(s, paragraph_atom::value, self->state.pending);
    for (const auto& s : cfg.subscribers) self->send(s, done_atom::value);
    self->quit();
  };
  StopCondition stop;
  stop.max_tokens = cfg.max_tokens;
  submit(self, batcher, Request::generate(cfg.write_to, cfg.view, cfg.prefill, cfg.sampling, stop),
         [=](const std::string&) { finish(); });
  return {
      [=](event_atom, const std::vector<uint8_t>& frame) {
        auto r = decode_reply(frame);
        if (!r) return;
        if (r->kind == "TokenEvent") {
          if (cfg.on_text) cfg.on_text(r->text);
          std::string& p = self->state.pending;
          p += r->text;
          for (const auto& sep : cfg.separators) {
            const auto at = p.find(sep);
            if (at == std::string::npos || at == 0) continue;
            const std::string piece = p.substr(0, at + sep.size());
            p.erase(0, at + sep.size());
            for (const auto& s : cfg.subscribers) self->send(s, paragraph_atom::value, piece);
            break;
          }
        } else if (r->kind == "RequestFinished") {
          finish();
        }
      },
  };
}

struct WriterState {
  int queued = 0;        // announced pieces not written yet
  bool busy = false;
  bool upstream_done = false;
  std::string line;
};

caf::behavior writer(caf::stateful_actor<WriterState>* self, caf::actor batcher, WriterConfig cfg) {
  auto maybe_done = [=] {
    if (self->state.upstream_done && !self->state.busy && self->state.queued == 0) {
      if (cfg.notify) self->send(cfg.notify, done_atom::value);
      self->quit();
    }
  };
  auto start = [=] {
    if (self->state.busy || self->state.queued == 0) return;
    self->state.busy = true;
    --self->state.queued;
    StopCondition stop;
    stop.strings = cfg.stop;
    stop.max_tokens = cfg.max_tokens;
    submit(self, batcher, Request::generate(cfg.write_to, cfg.view, cfg.prefill, cfg.sampling, stop),
           [=](const std::string& why) {
             if (cfg.sink) cfg.sink("(writer request refused: " + why + ")");
             self->state.busy = false;
           });
  };
  return {
      [=](paragraph_atom, const std::string&) {
        ++self->state.queued;
        start();
      },
      [=](done_atom) {
        self->state.upstream_done = true;
        maybe_done();
      },
      [=](event_atom, const std::vector<uint8_t>& frame) {
        auto r = decode_reply(frame);
        if (!r) return;
        if (r->kind == "TokenEvent") self->state.line += r->text;
        if (r->kind == "RequestFinished") {
          if (cfg.sink) cfg.sink(self->state.line);
          self->state.line.clear();
          self->state.busy = false;
          start();
          maybe_done();
        }
      },
  };
}

}  // namespace

caf::actor spawn_thinker(caf::actor_system& sys, caf::actor batcher, ThinkerConfig cfg) {
  return sys.spawn(thinker, std::move(batcher), std::move(cfg));
}

caf::actor spawn_writer(caf::actor_system& sys, caf::actor batcher, WriterConfig cfg) {
  return sys.spawn(writer, std::move(batcher), std::move(cfg));
}

}  // namespace chorus
