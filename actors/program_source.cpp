// The source role of a topology program (program_roles.h): runs external text into a block,
// in arrival order, one forward at a time; a window source clears its block as it fills.
#include <caf/all.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "actors/atoms.h"
#include "actors/program_roles.h"
#include "actors/program_triggers.h"
#include "actors/submit.h"
#include "net/codec.h"

namespace chorus::program_roles {
namespace {

using detail::TriggerState;

// ---- source: text from outside into a block, in order ------------------------------------------

struct SourceRoleState {
  struct Forward {
    int64_t lines;
    std::string text;
    bool carry;  // lines run again after a clear: not new
  };
  caf::actor ctl;
  TriggerState trig;
  bool sent = false;  // text_once: the text was scheduled
  bool input_ended = false;
  bool done = false;
  int64_t lines_in = 0;    // accepted
  int64_t lines_done = 0;  // new lines cached in the block
  int64_t next_emit = 0;
  std::deque<Forward> in_flight;    // forwards not finished, in order
  std::deque<std::string> recent;   // the last lines that are in (for events and carries)
  std::deque<std::string> backlog;  // text that waits for the block to be cleared
  bool rotating = false;            // a clear is due or under way
  int64_t lines_in_block = 0;       // since the last clear, carry included
  int64_t carry_lines = 0;
};

int64_t count_lines(const std::string& s) {
  return static_cast<int64_t>(std::count(s.begin(), s.end(), '\n'));
}

// What of the backlog goes in next, merged, up to 256 lines. A window source clears its block
// when the next text would overflow it (then `rotating` is set and nothing is taken), and runs
// the last few lines again after the clear (a reader triggered by them still sees them).
std::string next_from_backlog(SourceRoleState& st, const SourceRoleConfig& c) {
  auto fits = [&](int64_t more_lines) {
    return c.keep_lines == 0 || st.lines_in_block + more_lines <= c.keep_lines;
  };
  std::string merged;
  int64_t merged_lines = 0;
  while (!st.backlog.empty() && merged_lines < 256) {
    const std::string& t = st.backlog.front();
    const int64_t n = count_lines(t);
    if (!fits(merged_lines + n)) {
      if (!merged.empty()) break;
      if (st.lines_in_block > st.carry_lines) {
        st.rotating = true;
        return {};
      }  // else a text longer than the window: it goes in whole
    }
    merged += t;
    merged_lines += n;
    st.backlog.pop_front();
  }
  return merged;
}

// Text that arrived, as whole lines up to max_lines (then the input has ended); false when it
// comes past that.
bool take_text(SourceRoleState& st, const SourceRoleConfig& c, std::string& text) {
  if (st.input_ended && !c.text_once) return false;  // past max_lines
  if (c.records && !text.empty() && text.back() != '\n') text += '\n';
  if (c.text_once) st.input_ended = true;
  if (c.max_lines > 0) {  // whole lines up to the limit
    size_t cut = 0;
    int64_t n = 0;
    while (st.lines_in + n < c.max_lines && (cut = text.find('\n', cut)) != std::string::npos) {
      ++cut;
      ++n;
    }
    if (st.lines_in + n >= c.max_lines) {
      text.resize(cut);
      st.input_ended = true;
    }
  }
  st.lines_in += count_lines(text);
  return true;
}

// A forward of new lines is in: each goes into the recent lines, and every every_lines of them
// the recent lines go out as the source's event.
void lines_in(caf::stateful_actor<SourceRoleState>* self, const SourceRoleConfig& c, const std::string& text,
              size_t keep_recent) {
  auto& st = self->state;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    st.recent.push_back(text.substr(at, nl + 1 - at));
    if (st.recent.size() > keep_recent) st.recent.pop_front();
    if (++st.lines_done < st.next_emit || c.every_lines == 0) continue;
    std::string lines_text;
    for (const auto& l : st.recent) lines_text += l;
    self->send(st.ctl, signal_atom::value, c.emit_event, lines_text);
    st.next_emit += c.every_lines;
  }
}

caf::behavior source_role(caf::stateful_actor<SourceRoleState>* self, caf::actor batcher,
                          SourceRoleConfig cfg) {
  auto c = std::make_shared<SourceRoleConfig>(std::move(cfg));
  self->state.trig.init(c->triggers);
  self->state.next_emit = c->every_lines;
  const size_t keep_recent = static_cast<size_t>(std::max(c->every_lines, 1));
  auto fail = [=](const std::string& what) { self->send(self->state.ctl, fail_atom::value, c->name, what); };
  auto maybe_done = [=] {
    auto& st = self->state;
    if (st.done || !st.input_ended || !st.in_flight.empty() || st.rotating || !st.backlog.empty()) return;
    st.done = true;
    self->send(st.ctl, signal_atom::value, c->name + ".done", std::string());
  };
  auto forward = [=](const std::string& text, bool carry) {
    const auto toks = c->tokenizer->encode(text, {.parse_special = true});
    if (toks.empty()) return;
    auto& st = self->state;
    st.in_flight.push_back({carry ? 0 : count_lines(text), text, carry});
    st.lines_in_block += count_lines(text);
    submit(self, batcher, Request::forward(c->write_to, toks, c->view),
           [=](const std::string& why) { fail("forward refused: " + why); });
  };
  auto try_clear = std::make_shared<std::function<void()>>();
  // One forward at a time: what arrived meanwhile goes in as one (fewer, fuller steps).
  auto drain = [=] {
    auto& st = self->state;
    if (st.rotating || !st.in_flight.empty()) return maybe_done();
    const std::string merged = next_from_backlog(st, *c);
    if (st.rotating) return (*try_clear)();
    if (!merged.empty()) forward(merged, false);
    maybe_done();
  };
  *try_clear = [=] {
    if (!self->state.rotating || !self->state.in_flight.empty()) return;  // again when the forwards are in
    self->request(batcher, caf::infinite, frame_atom::value, encode_clear_block(0, c->write_to))
        .then(
            [=](const std::vector<uint8_t>& reply) {
              auto r = decode_reply(reply);
              auto& st = self->state;
              if (!r || r->kind != ReplyKind::block_info) {  // a reader holds the block: try again shortly
                self->delayed_send(self, std::chrono::milliseconds(5), tick_atom::value);
                return;
              }
              st.rotating = false;
              st.lines_in_block = 0;
              std::string carry;
              for (const auto& l : st.recent) carry += l;
              st.carry_lines = count_lines(carry);
              forward(carry, true);
              drain();
            },
            [=](caf::error& e) { fail("clear refused: " + caf::to_string(e)); });
  };
  auto send_text = [=] {
    if (self->state.sent) return;
    self->state.sent = true;
    self->delayed_send(self, std::chrono::milliseconds(c->delay_ms), text_atom::value, c->text);
  };
  return {
      [=](start_atom, const caf::actor& ctl) {
        self->state.ctl = ctl;
        if (c->text_once && c->triggers.on.empty() && c->triggers.after.empty()) send_text();
      },
      [=](signal_atom, const std::string& ev, const std::string&) {
        if (c->text_once && self->state.trig.on_signal(c->triggers, ev) > 0) send_text();
      },
      [=](tick_atom) { (*try_clear)(); },
      [=](text_atom, std::string text) {
        if (!take_text(self->state, *c, text)) return;
        self->state.backlog.push_back(std::move(text));
        drain();
      },
      [=](done_atom) {
        self->state.input_ended = true;
        maybe_done();
      },
      [=](event_atom, const std::vector<uint8_t>& frame) {
        auto r = decode_reply(frame);
        if (!r || r->kind != ReplyKind::finished) return;
        auto& st = self->state;
        if (r->reason == FinishReason::error || r->reason == FinishReason::context_full)
          return fail("forward failed: " + r->text);
        if (st.in_flight.empty()) return;
        SourceRoleState::Forward f = std::move(st.in_flight.front());
        st.in_flight.pop_front();
        if (!f.carry) lines_in(self, *c, f.text, keep_recent);
        if (st.rotating) (*try_clear)();
        drain();
      },
  };
}

}  // namespace

caf::actor spawn_source(caf::actor_system& sys, caf::actor batcher, SourceRoleConfig cfg) {
  return sys.spawn(source_role, std::move(batcher), std::move(cfg));
}

}  // namespace chorus::program_roles
