#include "actors/roles.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <caf/all.hpp>
#include <cerrno>
#include <cstring>
#include <deque>

#include "actors/atoms.h"
#include "actors/submit.h"
#include "net/codec.h"

namespace chorus {
namespace {

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
        if (r->kind == ReplyKind::token) {
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
        } else if (r->kind == ReplyKind::finished) {
          finish();
        }
      },
  };
}

struct WriterState {
  int queued = 0;  // announced pieces not written yet
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
        if (r->kind == ReplyKind::token) self->state.line += r->text;
        if (r->kind == ReplyKind::finished) {
          if (cfg.sink) cfg.sink(self->state.line);
          self->state.line.clear();
          self->state.busy = false;
          start();
          maybe_done();
        }
      },
  };
}

struct ProbeState {
  int64_t last = 0;  // watched block's cached length at the last question
  bool asking = false;
  bool again = false;  // a trigger came while asking: ask once more afterwards
};

caf::behavior probe(caf::stateful_actor<ProbeState>* self, caf::actor batcher, ProbeConfig cfg) {
  auto ask = std::make_shared<std::function<void()>>();
  *ask = [=] {
    if (self->state.asking) {
      self->state.again = true;
      return;
    }
    self->state.asking = true;
    submit(self, batcher, Request::probe(cfg.view, cfg.question, cfg.candidates),
           [=](const std::string&) { self->state.asking = false; });
  };
  if (cfg.watch >= 0) self->send(batcher, subscribe_atom::value, cfg.watch);
  const auto period = std::chrono::milliseconds(cfg.every_ms);
  if (cfg.every_ms > 0) self->delayed_send(self, period, tick_atom::value);
  return {
      [=](tick_atom) {
        (*ask)();
        self->delayed_send(self, period, tick_atom::value);
      },
      [=](grown_atom, BlockId, int64_t n) {
        if (n - self->state.last < cfg.every_new_tokens) return;
        self->state.last = n;
        (*ask)();
      },
      [=](paragraph_atom, const std::string&) { (*ask)(); },
      [=](text_atom, const std::string&) { (*ask)(); },
      [=](event_atom, const std::vector<uint8_t>& frame) {
        auto r = decode_reply(frame);
        if (!r) return;
        if (r->kind == ReplyKind::probe_result &&
            static_cast<size_t>(cfg.watch_candidate) < r->probabilities.size()) {
          const float p = r->probabilities[static_cast<size_t>(cfg.watch_candidate)];
          if (cfg.on_answer) cfg.on_answer(p);
          if (p >= cfg.threshold)
            for (const auto& s : cfg.subscribers) self->send(s, fired_atom::value, cfg.watch_candidate, p);
        }
        if (r->kind == ReplyKind::finished) {
          self->state.asking = false;
          if (self->state.again) {
            self->state.again = false;
            (*ask)();
          }
        }
      },
      [=](stop_atom) { self->quit(); },
  };
}

caf::behavior source(caf::event_based_actor* self, caf::actor batcher, SourceConfig cfg) {
  return {
      [=](text_atom, const std::string& text) {
        const auto toks = cfg.tokenizer->encode(text, {.parse_special = true});
        if (!toks.empty())
          submit(self, batcher, Request::forward(cfg.write_to, toks, cfg.view), [](const std::string&) {});
      },
      [](event_atom, const std::vector<uint8_t>&) {},  // the forwards' completions
      [=](stop_atom) { self->quit(); },
  };
}

caf::behavior sink(caf::event_based_actor* self, SinkConfig cfg) {
  return {
      [=](text_atom, const std::string& text) {
        if (cfg.callback) {
          cfg.callback(text);
        } else {
          std::fwrite(text.data(), 1, text.size(), cfg.stream);
          std::fflush(cfg.stream);
        }
      },
      [=](stop_atom) { self->quit(); },
  };
}

// Sends each complete line of `partial` to `target` as (text_atom, line + "\n") and keeps the rest.
void send_lines(caf::blocking_actor* self, const caf::actor& target, std::string& partial) {
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1)
    self->send(target, text_atom::value, partial.substr(start, nl + 1 - start));
  partial.erase(0, start);
}

void file_tail(caf::blocking_actor* self, std::string path, caf::actor target, bool from_start, int poll_ms) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f != nullptr && !from_start) std::fseek(f, 0, SEEK_END);
  std::string partial;
  for (bool running = true; running;) {
    self->receive([&](stop_atom) { running = false; }, [&](caf::exit_msg&) { running = false; },
                  caf::after(std::chrono::milliseconds(poll_ms)) >> [] {});
    if (f == nullptr) f = std::fopen(path.c_str(), "rb");  // not there yet: keep trying
    if (f == nullptr || !running) continue;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) partial.append(buf, n);
    std::clearerr(f);  // at EOF: keep polling for what is appended next
    send_lines(self, target, partial);
  }
  if (f != nullptr) std::fclose(f);
}

void fd_lines(caf::blocking_actor* self, int fd, caf::actor target, caf::actor notify, int poll_ms) {
  std::string partial;
  for (bool running = true; running;) {
    self->receive([&](stop_atom) { running = false; }, [&](caf::exit_msg&) { running = false; },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    if (!running) break;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, poll_ms);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    char buf[4096];
    const ssize_t n = ready < 0 ? -1 : ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n > 0) {
      partial.append(buf, static_cast<size_t>(n));
      send_lines(self, target, partial);
      continue;
    }
    // End of input (or an error reading it): the last line even without a newline, then done.
    if (n < 0) spdlog::error("reading fd {}: {}", fd, std::strerror(errno));
    if (!partial.empty()) self->send(target, text_atom::value, partial);
    running = false;
  }
  if (notify) self->send(notify, done_atom::value);
}

}  // namespace

caf::actor spawn_fd_lines(caf::actor_system& sys, int fd, caf::actor target, caf::actor notify, int poll_ms) {
  return sys.spawn<caf::detached>(fd_lines, fd, std::move(target), std::move(notify), poll_ms);
}

caf::actor spawn_file_tail(caf::actor_system& sys, const std::string& path, caf::actor target,
                           bool from_start, int poll_ms) {
  return sys.spawn<caf::detached>(file_tail, path, std::move(target), from_start, poll_ms);
}

caf::actor spawn_probe(caf::actor_system& sys, caf::actor batcher, ProbeConfig cfg) {
  return sys.spawn(probe, std::move(batcher), std::move(cfg));
}

caf::actor spawn_source(caf::actor_system& sys, caf::actor batcher, SourceConfig cfg) {
  return sys.spawn(source, std::move(batcher), std::move(cfg));
}

caf::actor spawn_sink(caf::actor_system& sys, SinkConfig cfg) {
  return sys.spawn(sink, std::move(cfg));
}

caf::actor spawn_thinker(caf::actor_system& sys, caf::actor batcher, ThinkerConfig cfg) {
  return sys.spawn(thinker, std::move(batcher), std::move(cfg));
}

caf::actor spawn_writer(caf::actor_system& sys, caf::actor batcher, WriterConfig cfg) {
  return sys.spawn(writer, std::move(batcher), std::move(cfg));
}

}  // namespace chorus
