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
#include "actors/role_messages.h"
#include "actors/submit.h"
#include "net/codec.h"
#include "net/role_codec.h"

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
    self->send(st.ctl, role_atom::value, encode_signal(c.emit_event, lines_text));
    st.next_emit += c.every_lines;
  }
}

// The source's steps, shared by its handlers (which hold it by a shared pointer).
class SourceRole : public std::enable_shared_from_this<SourceRole> {
 public:
  using Self = caf::stateful_actor<SourceRoleState>;
  SourceRole(Self* self, caf::actor batcher, SourceRoleConfig cfg)
      : self_(self),
        batcher_(std::move(batcher)),
        c_(std::move(cfg)),
        keep_recent_(static_cast<size_t>(std::max(c_.every_lines, 1))) {
    st().trig.init(c_.triggers);
    st().next_emit = c_.every_lines;
  }

  SourceRoleState& st() { return self_->state; }
  const std::string& name() const { return c_.name; }

  void start(const caf::actor& ctl) {
    st().ctl = ctl;
    if (c_.text_once && c_.triggers.on.empty() && c_.triggers.after.empty()) send_text();
  }
  void signal(const std::string& ev) {
    if (c_.text_once && st().trig.on_signal(c_.triggers, ev) > 0) send_text();
  }
  void text(std::string text) {
    if (!take_text(st(), c_, text)) return;
    st().backlog.push_back(std::move(text));
    drain();
  }

  void fail(const std::string& what) {
    self_->send(st().ctl, role_atom::value, encode_role_failed(c_.name, what));
  }

  void maybe_done() {
    if (st().done || !st().input_ended || !st().in_flight.empty() || st().rotating || !st().backlog.empty())
      return;
    st().done = true;
    self_->send(st().ctl, role_atom::value, encode_signal(c_.name + ".done", ""));
  }

  void forward(const std::string& text, bool carry) {
    const auto toks = c_.tokenizer->encode(text, {.parse_special = true});
    if (toks.empty()) return;
    st().in_flight.push_back({carry ? 0 : count_lines(text), text, carry});
    st().lines_in_block += count_lines(text);
    submit(self_, batcher_, Request::forward(c_.write_to, toks, c_.view),
           [me = shared_from_this()](const std::string& why) { me->fail("forward refused: " + why); });
  }

  // One forward at a time: what arrived meanwhile goes in as one (fewer, fuller steps).
  void drain() {
    if (st().rotating || !st().in_flight.empty()) return maybe_done();
    const std::string merged = next_from_backlog(st(), c_);
    if (st().rotating) return try_clear();
    if (!merged.empty()) forward(merged, false);
    maybe_done();
  }

  // A window source's clear, once its forwards are in; then the recent lines run again.
  void try_clear() {
    if (!st().rotating || !st().in_flight.empty()) return;  // again when the forwards are in
    auto me = shared_from_this();
    self_->request(batcher_, caf::infinite, frame_atom::value, encode_clear_block(0, c_.write_to))
        .then([me](const std::vector<uint8_t>& reply) { me->cleared(reply); },
              [me](caf::error& e) { me->fail("clear refused: " + caf::to_string(e)); });
  }

  void cleared(const std::vector<uint8_t>& reply) {
    auto r = decode_reply(reply);
    if (!r || r->kind != ReplyKind::block_info) {  // a reader holds the block: try again shortly
      self_->delayed_send(self_, std::chrono::milliseconds(5), tick_atom::value);
      return;
    }
    st().rotating = false;
    st().lines_in_block = 0;
    std::string carry;
    for (const auto& l : st().recent) carry += l;
    st().carry_lines = count_lines(carry);
    forward(carry, true);
    drain();
  }

  void send_text() {
    if (st().sent) return;
    st().sent = true;
    self_->delayed_send(self_, std::chrono::milliseconds(c_.delay_ms), role_atom::value,
                        encode_role_text(c_.text));
  }

  // A forward's event: the next forward in order is in (or the source fails).
  void finished(const std::vector<uint8_t>& frame) {
    auto r = decode_reply(frame);
    if (!r || r->kind != ReplyKind::finished) return;
    if (r->reason == FinishReason::error || r->reason == FinishReason::context_full)
      return fail("forward failed: " + r->text);
    if (st().in_flight.empty()) return;
    SourceRoleState::Forward f = std::move(st().in_flight.front());
    st().in_flight.pop_front();
    if (!f.carry) lines_in(self_, c_, f.text, keep_recent_);
    if (st().rotating) try_clear();
    drain();
  }

 private:
  Self* self_;
  caf::actor batcher_;
  SourceRoleConfig c_;
  size_t keep_recent_;
};

caf::behavior source_role(caf::stateful_actor<SourceRoleState>* self, caf::actor batcher,
                          SourceRoleConfig cfg) {
  auto r = std::make_shared<SourceRole>(self, std::move(batcher), std::move(cfg));
  return {
      [r](start_atom, const caf::actor& ctl, const Frame&) { r->start(ctl); },
      [r](tick_atom) { r->try_clear(); },
      [r](role_atom, const Frame& f) {
        auto m = read_role(r->name(), f);
        if (!m) return;
        switch (m->kind) {
          case RoleKind::signal: return r->signal(m->event);
          case RoleKind::text: return r->text(std::move(m->text));
          case RoleKind::feed_ended: r->st().input_ended = true; return r->maybe_done();
          default: return unexpected_role(r->name(), *m);
        }
      },
      [r](event_atom, const std::vector<uint8_t>& frame) { r->finished(frame); },
  };
}

}  // namespace

caf::actor spawn_source(caf::actor_system& sys, caf::actor batcher, SourceRoleConfig cfg) {
  return sys.spawn(source_role, std::move(batcher), std::move(cfg));
}

}  // namespace chorus::program_roles
