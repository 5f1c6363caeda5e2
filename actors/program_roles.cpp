#include "actors/program_roles.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <caf/all.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <zmq.hpp>
#include "actors/atoms.h"
#include "actors/batcher.h"
#include "actors/feeders.h"
#include "actors/node_port.h"
#include "actors/program_triggers.h"
#include "actors/role_messages.h"
#include "actors/sandbox.h"
#include "actors/submit.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "net/codec.h"
#include "net/role_codec.h"

namespace chorus::program_roles {
namespace {

using detail::done_of;
using detail::ends_with;
using detail::TriggerState;

// ---- controller: routes events, counts tokens, ends the program --------------------------------

struct ControllerState {
  int64_t tokens = 0;
  bool ended = false;
  std::set<std::string> done;  // actors whose `.done` fired (a changed one: its new self's)
};

bool hears(const ControllerConfig& c, const std::string& ev, const caf::actor& who) {
  auto it = c.subscribers.find(ev);
  return it != c.subscribers.end() &&
         std::find(it->second.begin(), it->second.end(), who) != it->second.end();
}

// A patch: route by its Rewiring from now on (see program_roles.h).
void rewire(caf::stateful_actor<ControllerState>* self, ControllerConfig& c, const Rewiring& w) {
  auto& done = self->state.done;
  c.subscribers = w.subscribers;
  c.roles = w.roles;
  c.finish = w.finish;
  for (const auto& n : w.pending_gone) c.pending.erase(n);
  for (const auto& n : w.pending_added) c.pending.insert(n);
  for (const auto& n : w.fresh) done.erase(n);
  for (const auto& [who, emitters] : w.upstream) {
    std::vector<std::string> left;
    for (const auto& e : emitters)
      if (!done.count(e)) left.push_back(e);
    self->send(who, role_atom::value, encode_upstream(left));
  }
  for (const auto& n : w.fresh) {
    const caf::actor& who = c.roles.at(n);
    for (const auto& d : done)
      if (hears(c, d + ".done", who)) self->send(who, role_atom::value, encode_signal(d + ".done", ""));
  }
}

caf::behavior controller(caf::stateful_actor<ControllerState>* self, ControllerConfig cfg) {
  auto cfgp = std::make_shared<ControllerConfig>(std::move(cfg));
  auto end = [self, cfgp](const std::string& why, const std::string& error) {
    if (self->state.ended) return;
    self->state.ended = true;
    Outcome& o = *cfgp->outcome;
    std::lock_guard<std::mutex> l(o.m);
    if (o.report.ended_by != "error") {  // (a placed actor lost for good said so first: that stands)
      o.report.ended_by = why;
      o.report.error = error;
    }
    o.report.seconds = o.now();
    o.report.generated_tokens = self->state.tokens;
    o.ended = true;
    o.cv.notify_all();
  };
  if (cfgp->budget_seconds > 0)
    self->delayed_send(self, std::chrono::microseconds(static_cast<int64_t>(cfgp->budget_seconds * 1e6)),
                       tick_atom::value);
  // A named event: counted, told to the hook, routed (the same frame) to who runs on it.
  auto on_signal = [=](const Frame& f, const std::string& ev, const std::string& text) {
    if (self->state.ended) return;
    if (const std::string who = done_of(ev); !who.empty()) {
      auto r = cfgp->roles.find(who);
      if (r != cfgp->roles.end() && caf::actor_cast<caf::actor>(self->current_sender()) != r->second)
        return;  // its old self's, retired by a patch
      self->state.done.insert(who);
    }
    {
      std::lock_guard<std::mutex> l(cfgp->outcome->m);
      ++cfgp->outcome->report.events[ev];
    }
    const auto it = cfgp->subscribers.find(ev);
    if (cfgp->hook) {
      ProgramEvent e{ev, text, cfgp->outcome->now(), {}};
      if (it != cfgp->subscribers.end())
        for (const caf::actor& who : it->second)
          for (const auto& [name, h] : cfgp->roles)
            if (h == who) e.to.push_back(name);
      cfgp->hook(e);
    }
    if (it != cfgp->subscribers.end()) {
      const caf::message routed = caf::make_message(role_atom::value, f);
      for (const caf::actor& who : it->second) self->send(who, routed);
    }
    if (const std::string who = done_of(ev); !who.empty()) cfgp->pending.erase(who);
    if (cfgp->finish.count(ev))
      end("finish event " + ev, "");
    else if (cfgp->pending.empty() && !done_of(ev).empty())
      end("all roles done", "");
  };
  return {
      [=](role_atom, const Frame& f) {
        auto m = read_role("controller", f);
        if (!m) return;
        switch (m->kind) {
          case RoleKind::signal: return on_signal(f, m->event, m->text);
          case RoleKind::tokens:
            self->state.tokens += m->count;
            if (cfgp->budget_tokens > 0 && self->state.tokens >= cfgp->budget_tokens) end("token budget", "");
            return;
          case RoleKind::failed: return end("error", m->actor + ": " + m->text);
          default: return unexpected_role("controller", *m);
        }
      },
      [=](rewire_atom, const Rewiring& w) {
        if (self->state.ended) return false;
        rewire(self, *cfgp, w);
        if (cfgp->pending.empty()) end("all roles done", "");
        return true;
      },
      [=](tick_atom) { end("time budget", ""); },
      [=](stop_atom) { end("stopped", ""); },
  };
}

// ---- thinker and writer: generate into a block, announce pieces, feed sinks ---------------------

// A tool call at the end of `text`: <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
// Returns false when the text does not end with one; `name` empty when the call is malformed
// (then `error` says why).
bool parse_tool_call(const std::string& text, std::string* name, std::string* args, std::string* error) {
  static const std::string open = "<tool_call>", close = "</tool_call>";
  if (!ends_with(text, close)) return false;
  const size_t at = text.rfind(open);
  if (at == std::string::npos) return false;
  const std::string body = text.substr(at + open.size(), text.size() - close.size() - at - open.size());
  name->clear();
  try {
    const auto j = nlohmann::json::parse(body);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) {
      *error = "a tool call is {\"name\": \"...\", \"arguments\": {...}}";
      return true;
    }
    *name = j["name"];
    const auto& a = j.contains("arguments")    ? j["arguments"]
                    : j.contains("parameters") ? j["parameters"]
                                               : nlohmann::json::object();
    *args = a.is_string() ? a.get<std::string>() : a.dump();
  } catch (const nlohmann::json::exception& e) {
    *error = std::string("the tool call is not JSON: ") + e.what();
  }
  return true;
}

struct GeneratorState {
  caf::actor ctl;
  TriggerState trig;
  std::deque<std::string> queued;  // runs to do: the text of the event that started each
  int runs = 0;
  bool busy = false;
  bool done = false;
  std::string piece;                 // this run's text (tool calls and results included)
  std::string request_text;          // the text of the request in flight (a run may take several)
  int tool_calls = 0;                // in this run
  int generated = 0;                 // tokens in this run
  std::vector<std::string> pending;  // per emit: text since its last event
  Request next;                      // `fresh`: the run's request, submitted once its block is cleared
  bool retiring = false;             // a patch replaces or removes it: this run is its last
  bool editing = false;           // waiting for its edit_program call (the patcher is busy with that patch)
  caf::response_promise retired;  // answered with `queued` when that run ends
  // The journal's record of the request in flight, played back when the forward that writes its
  // tokens ends (ProgramJournal::replay).
  std::optional<ProgramJournal::Generation> replaying;
};

using GeneratorSelf = caf::stateful_actor<GeneratorState>*;
using GeneratorConf = std::shared_ptr<const GeneratorConfig>;

// A request that ended without its answer (not a short success): the run fails.
bool ended_in_failure(FinishReason f) {
  return f == FinishReason::error || f == FinishReason::context_full;
}

// Text to the generator's sinks: one frame, the same message to each.
void to_sinks(GeneratorSelf self, const GeneratorConfig& c, const std::string& text) {
  if (c.sinks.empty()) return;
  const caf::message m = caf::make_message(role_atom::value, encode_role_text(text, c.journal_name));
  for (const auto& s : c.sinks) self->send(s, m);
}

// A token of the run: counted, streamed to the sinks, and into each emit's pending text (an
// event when its separator comes).
void on_generated(GeneratorSelf self, const GeneratorConf& c, const Reply& r) {
  auto& st = self->state;
  if (r.token >= 0) {
    self->send(st.ctl, role_atom::value, encode_tokens_made(1));
    ++st.generated;
  }
  st.piece += r.text;
  st.request_text += r.text;
  if (c->stream) to_sinks(self, *c, r.text);
  for (size_t i = 0; i < c->emits.size(); ++i) {
    std::string& p = st.pending[i];
    p += r.text;
    const auto at = p.find(c->emits[i].at, 1);  // a piece has something before its end
    if (at == std::string::npos) continue;
    self->send(st.ctl, role_atom::value,
               encode_signal(c->emits[i].event, p.substr(0, at + c->emits[i].at.size())));
    p.erase(0, at + c->emits[i].at.size());
  }
}

// Submits a request of the run (request st.tool_calls of run st.runs): a generate, recorded in
// the journal as it streams — or, when the journal holds that request's finished record (the
// program runs again after its node was lost), a forward of the recorded input and tokens into
// the block, after which the generator hears the recorded tokens (its event handler).
void submit_generate(GeneratorSelf self, const GeneratorConf& c, const caf::actor& batcher,
                     const Request& r) {
  auto& st = self->state;
  auto failed = [=](const std::string& why) {
    self->send(self->state.ctl, role_atom::value, encode_role_failed(c->name, "generate refused: " + why));
  };
  if (c->journal) {
    if (auto g = c->journal->replay(c->journal_name, st.runs, st.tool_calls, r.tokens)) {
      Request f = Request::forward(r.write_to, r.tokens, r.view);
      for (TokenId t : g->out)
        if (t >= 0) f.tokens.push_back(t);
      st.replaying = std::move(*g);
      submit(self, batcher, f, failed);
      return;
    }
    c->journal->begin(c->journal_name, st.runs, st.tool_calls, r.tokens);
  }
  submit(self, batcher, r, failed);
}

// When the request stopped at a tool call (and the run may make one more): the program acts —
// the tool runs in its sandbox, its result goes into the block, and the same run goes on from
// there. False when it did not.
bool go_on_with_tool(GeneratorSelf self, const GeneratorConf& c, const caf::actor& batcher, const Reply& r) {
  auto& st = self->state;
  std::string tool, args, error;
  if ((!c->tools && !c->patcher) || r.reason != FinishReason::stop_string ||
      st.tool_calls >= c->max_tool_calls || st.generated >= c->request.stop.max_tokens ||
      !parse_tool_call(st.request_text, &tool, &args, &error))
    return false;
  ++st.tool_calls;
  // edit_program is the program's own: not a tool phase (the patch's result is program.patched).
  const bool edit = tool == topology::kEditProgram;
  self->send(st.ctl, role_atom::value,
             encode_signal(c->name + (edit ? ".edit_program" : ".tool_call"),
                           edit ? args : st.request_text.substr(st.request_text.rfind("<tool_call>"))));
  auto go_on = [=](const std::string& result) {
    auto& s2 = self->state;
    s2.editing = false;
    if (!edit) self->send(s2.ctl, role_atom::value, encode_signal(c->name + ".tool_result", result));
    const std::string response = "\n<tool_response>\n" + result + "\n</tool_response>\n";
    s2.piece += response;
    if (c->stream) to_sinks(self, *c, response);
    Request next = c->request;
    next.tokens = c->tokenizer->encode(response, {.parse_special = true});
    next.stop.max_tokens = std::max(1, c->request.stop.max_tokens - s2.generated);
    s2.request_text.clear();
    submit_generate(self, c, batcher, next);
  };
  const caf::actor& to = edit ? c->patcher : c->tools;
  const int call = st.tool_calls - 1, run = st.runs;
  std::optional<std::string> recorded;  // a tool's result from an earlier run of the program
  if (!edit && to && !tool.empty() && c->journal)
    recorded = c->journal->replay_tool(c->journal_name, run, call);
  if (tool.empty()) {
    go_on("error: " + error);
  } else if (!to) {
    go_on("error: no tool \"" + tool + "\" here");
  } else if (recorded) {
    go_on(*recorded);  // the tool ran in that run: not again
  } else {
    auto answered = [=](const Frame& reply) {
      auto m = decode_role(reply);
      const std::string result = !m ? "error: " + m.error().message
                                 : m->kind != RoleKind::tool_result
                                     ? std::string("error: the tool answered ") + role_kind_name(m->kind)
                                     : m->text;
      // A patch is applied again by the new run; a run cancelled as the program ended is not a
      // result.
      if (c->journal && !(c->ending && c->ending->load()))
        c->journal->tool(c->journal_name, run, call,
                         edit ? std::nullopt : std::optional<std::string>(result));
      go_on(result);
    };
    auto silent = [=](caf::error& e) { go_on("error: the tool did not answer: " + caf::to_string(e)); };
    st.editing = edit;
    self->request(to, caf::infinite, role_ask_atom::value,
                  edit ? encode_edit_program(c->name, args) : encode_tool_call(tool, args, c->name))
        .then(answered, silent);
  }
  return true;
}

// The run is over: what is left of each emit is its last piece; the sinks get the run's text
// as one line (not streaming) or its closing newline.
void end_run(GeneratorSelf self, const GeneratorConf& c) {
  auto& st = self->state;
  for (size_t i = 0; i < c->emits.size(); ++i) {
    if (st.pending[i].find_first_not_of(" \t\r\n") != std::string::npos)
      self->send(st.ctl, role_atom::value, encode_signal(c->emits[i].event, st.pending[i]));
    st.pending[i].clear();
  }
  if (!c->stream) {
    std::string line = st.piece;
    for (const auto& s : c->request.stop.strings)
      if (ends_with(line, s)) line.erase(line.size() - s.size());
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.erase(0, 1);
    if (!line.empty()) to_sinks(self, *c, line + "\n");
  } else if (!st.piece.empty() && st.piece.back() != '\n') {
    to_sinks(self, *c, "\n");
  }
  st.busy = false;
  ++st.runs;
}

caf::behavior generator(caf::stateful_actor<GeneratorState>* self, caf::actor batcher, GeneratorConfig cfg) {
  auto c = std::make_shared<GeneratorConfig>(std::move(cfg));
  self->state.trig.init(c->triggers);
  self->state.pending.resize(c->emits.size());
  auto once = c->triggers.on.empty();
  auto maybe_done = [=] {
    auto& st = self->state;
    if (st.done || st.busy || !st.queued.empty() || st.retiring || !st.ctl) return;
    if (once ? st.runs == 0 : !st.trig.upstream_left.empty()) return;
    st.done = true;
    self->send(st.ctl, role_atom::value, encode_signal(c->name + ".done", ""));
  };
  auto submit_run = [=] { submit_generate(self, c, batcher, self->state.next); };
  // `fresh`: the block is cleared first; while a reader holds it, the clear is tried again shortly.
  auto clear_then_submit = [=] {
    self->request(batcher, caf::infinite, frame_atom::value, encode_clear_block(0, c->clear_before_run))
        .then(
            [=](const std::vector<uint8_t>& reply) {
              auto r = decode_reply(reply);
              if (r && r->kind == ReplyKind::block_info) return submit_run();
              self->delayed_send(self, std::chrono::milliseconds(5), tick_atom::value);
            },
            [=](caf::error& e) {
              self->send(self->state.ctl, role_atom::value,
                         encode_role_failed(c->name, "clearing its block refused: " + caf::to_string(e)));
            });
  };
  auto run = [=] {
    auto& st = self->state;
    if (st.busy || st.queued.empty() || st.done || st.retiring || !st.ctl) return;
    st.busy = true;
    st.next = c->request;
    st.next.tokens = c->prefill.tokens(st.queued.front());
    st.queued.pop_front();
    st.piece.clear();
    st.request_text.clear();
    st.tool_calls = 0;
    st.generated = 0;
    if (c->clear_before_run >= 0 && st.runs > 0) return clear_then_submit();
    submit_run();
  };
  // Started: with no triggers it runs once; `carried`: the runs its old self had queued (a
  // patch changed it), before those triggered since it was made.
  auto start = [=](const caf::actor& ctl, const std::vector<std::string>& carried) {
    auto& st = self->state;
    st.ctl = ctl;
    st.queued.insert(st.queued.begin(), carried.begin(), carried.end());
    if (c->triggers.on.empty() && c->triggers.after.empty() && carried.empty()) st.queued.emplace_back();
    run();
    maybe_done();
  };
  // A patch retires it: the run it is in ends first; then it answers with what it had queued.
  auto quit_retired = [=] {
    auto& st = self->state;
    st.retired.deliver(encode_retired(std::vector<std::string>(st.queued.begin(), st.queued.end())));
    self->quit();
  };
  // A request of the run ended (live, or played back from the journal).
  auto finished = [=](const Reply& r) {
    if (ended_in_failure(r.reason)) {
      self->send(self->state.ctl, role_atom::value,
                 encode_role_failed(c->name, "generation failed: " + r.text));
      return;
    }
    if (go_on_with_tool(self, c, batcher, r)) return;
    end_run(self, c);
    if (self->state.retiring) return quit_retired();
    run();
    maybe_done();
  };
  return {
      [=](start_atom, const caf::actor& ctl, const Frame& f) {
        if (auto m = read_role(c->name, f); m && m->kind == RoleKind::start) start(ctl, m->names);
      },
      [=](role_ask_atom, const Frame& f) -> caf::result<Frame> {
        auto m = read_role(c->name, f);
        if (!m || m->kind != RoleKind::retire) return caf::sec::unexpected_message;
        auto& st = self->state;
        st.retiring = true;
        st.retired = self->make_response_promise();
        // In an edit_program call, its answer waits for the patch retiring it: it goes now.
        if (!st.busy || st.editing) quit_retired();
        return st.retired;
      },
      [=](role_atom, const Frame& f) {
        auto m = read_role(c->name, f);
        if (!m) return;
        auto& st = self->state;
        switch (m->kind) {
          case RoleKind::upstream:
            st.trig.rewire(m->names);
            maybe_done();
            break;
          case RoleKind::signal:
            for (int n = st.trig.on_signal(c->triggers, m->event); n > 0; --n) st.queued.push_back(m->text);
            run();
            maybe_done();
            break;
          default: unexpected_role(c->name, *m);
        }
      },
      [=](tick_atom) { clear_then_submit(); },
      [=](event_atom, const std::vector<uint8_t>& frame) {
        auto r = decode_reply(frame);
        if (!r) return;
        auto& st = self->state;
        if (st.replaying) {  // the forward of a recorded generation: now its tokens, then its end
          if (r->kind != ReplyKind::finished) return;
          if (ended_in_failure(r->reason)) {
            st.replaying.reset();
            return finished(*r);  // its block does not hold the tokens: the run fails as a live one would
          }
          ProgramJournal::Generation g = std::move(*st.replaying);
          st.replaying.reset();
          for (size_t i = 0; i < g.out.size(); ++i) {
            Reply tr;
            tr.kind = ReplyKind::token;
            tr.token = g.out[i];
            tr.text = g.token_text(i);
            on_generated(self, c, tr);
          }
          Reply fr;
          fr.kind = ReplyKind::finished;
          fr.reason = g.reason;
          return finished(fr);
        }
        if (r->kind == ReplyKind::token) {
          if (c->journal) c->journal->token(c->journal_name, st.runs, st.tool_calls, r->token, r->text);
          on_generated(self, c, *r);
        } else if (r->kind == ReplyKind::finished) {
          if (c->journal && !ended_in_failure(r->reason))
            c->journal->finish(c->journal_name, st.runs, st.tool_calls, r->reason);
          finished(*r);
        }
      },
  };
}

// ---- probe: ask a question over a view on triggers; fire an event past a threshold -------------

struct ProbeRoleState {
  caf::actor ctl;
  TriggerState trig;
  int64_t last = 0;
  std::map<int64_t, std::string> out;  // questions out: request id -> the text asked about
  int submitting = 0;                  // sent, not yet accepted
  std::deque<std::string> waiting;     // triggers past the limit on questions out; timer and growth
                                       // triggers (no text) wait as one
  bool above = false;
  bool done = false;
};

// Up to this many questions of one probe run at once (batched into the same steps); answers are
// judged in the order they come.
constexpr int kProbeQuestionsOut = 8;

// An answer: past the threshold (on the rising edge only, with `edge`) the probe fires, its
// event carrying what was asked about, else the probability.
void judge(caf::stateful_actor<ProbeRoleState>* self, const ProbeRoleConfig& c, const Reply& r,
           const std::string& asked) {
  auto& st = self->state;
  float p = 0;
  for (int i : c.fire_on)
    if (static_cast<size_t>(i) < r.probabilities.size()) p += r.probabilities[static_cast<size_t>(i)];
  const bool above = p >= c.threshold;
  if (above && (!c.edge || !st.above)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(p));
    self->send(st.ctl, role_atom::value, encode_signal(c.fires, asked.empty() ? std::string(buf) : asked));
  }
  st.above = above;
}

caf::behavior probe_role(caf::stateful_actor<ProbeRoleState>* self, caf::actor batcher, ProbeRoleConfig cfg) {
  auto c = std::make_shared<ProbeRoleConfig>(std::move(cfg));
  self->state.trig.init(c->triggers);
  auto ask = [=](const std::string& text) {
    auto& st = self->state;
    if (static_cast<int>(st.out.size()) + st.submitting >= kProbeQuestionsOut) {
      if (!text.empty() || st.waiting.empty() || !st.waiting.back().empty()) st.waiting.push_back(text);
      return;
    }
    ++st.submitting;
    Request req = c->request;
    std::string question_text;
    if (c->question.dynamic() && c->question.tokenizer)
      req.tokens = c->question.tokens(text);
    else if (c->question.dynamic())
      req.tokens.clear(), question_text = c->question.filled(text);
    auto submitted = [=](const std::vector<uint8_t>& reply) {
      --self->state.submitting;
      auto rep = decode_reply(reply);
      if (rep && rep->kind == ReplyKind::submitted)
        self->state.out[rep->id] = text;
      else
        self->send(self->state.ctl, role_atom::value,
                   encode_role_failed(c->name, "probe refused: " + (rep ? rep->text : rep.error().message)));
    };
    auto refused = [=](caf::error& e) {
      self->send(self->state.ctl, role_atom::value,
                 encode_role_failed(c->name, "probe refused: " + caf::to_string(e)));
    };
    const Frame question = encode_request(0, req, question_text);
    if (c->relayed)
      self->request(batcher, caf::infinite, frame_atom::value, question, text).then(submitted, refused);
    else
      self->request(batcher, caf::infinite, frame_atom::value, question).then(submitted, refused);
  };
  // Only a probe driven by events alone ends: when everyone emitting them is done.
  auto maybe_done = [=] {
    auto& st = self->state;
    if (st.done || !st.ctl || !st.out.empty() || st.submitting > 0 || !st.waiting.empty() || c->watch >= 0 ||
        c->every_ms > 0 || !st.trig.upstream_left.empty())
      return;
    st.done = true;
    self->send(st.ctl, role_atom::value, encode_signal(c->name + ".done", ""));
  };
  const auto period = std::chrono::milliseconds(c->every_ms);
  return {
      // `carried` (StartRole's names): what it asks about first — the questions a lost self of it
      // had out (a placed probe hosted anew, actors/placed_actor.h).
      [=](start_atom, const caf::actor& ctl, const Frame& f) {
        auto& st = self->state;
        st.ctl = ctl;
        if (auto m = read_role(c->name, f); m && m->kind == RoleKind::start)
          for (auto it = m->names.rbegin(); it != m->names.rend(); ++it) st.waiting.push_front(*it);
        if (c->watch >= 0) self->send(batcher, subscribe_atom::value, c->watch);
        if (c->every_ms > 0) self->delayed_send(self, period, tick_atom::value);
        for (std::deque<std::string> early = std::move(st.waiting); !early.empty(); early.pop_front())
          ask(early.front());  // what triggered it before it started (made by a patch)
        maybe_done();
      },
      [=](role_ask_atom, const Frame& f) -> caf::result<Frame> {
        auto m = read_role(c->name, f);
        if (!m || m->kind != RoleKind::retire) return caf::sec::unexpected_message;
        self->quit();  // its questions out are dropped: it has nothing queued to hand on
        return encode_retired({});
      },
      [=](role_atom, const Frame& f) {
        auto m = read_role(c->name, f);
        if (!m) return;
        auto& st = self->state;
        switch (m->kind) {
          case RoleKind::upstream:
            st.trig.rewire(m->names);
            maybe_done();
            break;
          case RoleKind::signal:
            if (st.trig.on_signal(c->triggers, m->event) > 0) {
              if (st.ctl)
                ask(m->text);
              else
                st.waiting.push_back(m->text);
            }
            maybe_done();
            break;
          default: unexpected_role(c->name, *m);
        }
      },
      [=](tick_atom) {
        ask("");
        self->delayed_send(self, period, tick_atom::value);
      },
      [=](event_atom, const std::vector<uint8_t>& frame) {
        auto r = decode_reply(frame);
        if (!r) return;
        auto& st = self->state;
        if (r->kind == ReplyKind::block_grown) {  // the watched block grew (BlockGrown)
          if (r->tokens - st.last < c->every_new_tokens) return;
          st.last = r->tokens;
          return ask("");
        }
        auto it = st.out.find(r->id);
        if (it == st.out.end()) return;
        if (r->kind == ReplyKind::probe_result) {
          judge(self, *c, *r, it->second);
        } else if (r->kind == ReplyKind::finished) {
          if (ended_in_failure(r->reason))
            self->send(st.ctl, role_atom::value, encode_role_failed(c->name, "probe failed: " + r->text));
          st.out.erase(it);
          while (!st.waiting.empty() &&
                 static_cast<int>(st.out.size()) + st.submitting < kProbeQuestionsOut) {
            std::string next = std::move(st.waiting.front());
            st.waiting.pop_front();
            ask(next);
          }
          maybe_done();
        }
      },
  };
}

}  // namespace

caf::actor spawn_controller(caf::actor_system& sys, ControllerConfig cfg) {
  return sys.spawn(controller, std::move(cfg));
}
caf::actor spawn_generator(caf::actor_system& sys, caf::actor batcher, GeneratorConfig cfg) {
  return sys.spawn(generator, std::move(batcher), std::move(cfg));
}
caf::actor spawn_probe(caf::actor_system& sys, caf::actor batcher, ProbeRoleConfig cfg) {
  return sys.spawn(probe_role, std::move(batcher), std::move(cfg));
}

}  // namespace chorus::program_roles
