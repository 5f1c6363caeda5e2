#include "gateway/gateway.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "actors/atoms.h"
#include "actors/submit.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "engine/step/trace.h"
#include "engine/tokenizer/chat_template.h"
#include "gateway/access_log.h"
#include "gateway/auth.h"
#include "gateway/gateway_backends.h"
#include "gateway/gateway_programs.h"
#include "gateway/gateway_topology.h"
#include "gateway/http_listen.h"
#include "gateway/openai_request.h"
#include "gateway/openai_response.h"
#include "net/codec.h"

namespace chorus {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Ends a streamed request's turn once: when its reply is over, or — when the reply never ran
// (the client went away before it began) — when the reply is dropped; the generation then ran
// unseen, so what the block holds is not known and the next request starts it again.
class TurnEnd {
 public:
  TurnEnd(std::shared_ptr<GatewayPrograms> programs, std::string id)
      : programs_(std::move(programs)), id_(std::move(id)) {}
  ~TurnEnd() {
    if (done_) return;
    programs_->set_contents(id_, "", 1);  // not known (tokens > 0: the next request clears it)
    end();
  }
  void end() {
    if (!done_.exchange(true)) programs_->end(id_);
  }
  // The turn moved to another backend (resume), maybe under another id (a one-shot program's):
  // that one is ended next.
  void rebind(std::shared_ptr<GatewayPrograms> programs, std::string id) {
    programs_ = std::move(programs);
    id_ = std::move(id);
    done_ = false;
  }

 private:
  std::shared_ptr<GatewayPrograms> programs_;
  std::string id_;
  std::atomic<bool> done_{false};
};

}  // namespace

struct Gateway::Impl {
  caf::actor_system* sys = nullptr;
  const Model* model = nullptr;
  std::shared_ptr<const ChatTemplate> chat;  // what prompts are rendered with
  GatewayOptions opts;
  std::string model_name;
  httplib::Server svr;
  std::thread http;
  int port = 0;

  // What a request runs on its program's block, decided once: the rendered prompt, and the
  // tokens to run — only what is new when the block already holds the conversation so far.
  struct Plan {
    BlockId block = -1;
    std::string prompt;
    std::vector<TokenId> toks;
    int64_t have_tokens = 0;  // in the block, reused
    bool restart = false;     // the history changed: the block starts again
    bool known = true;        // the prompt's text is known (not for a prompt of token ids)
  };

  // The request's messages through the chat template, with its tools: given to the template
  // where it shows them to the model, else described in a system turn of chorus's own.
  // A template that knows no tools gets the history's calls and results as text, in the format
  // chorus's system turn teaches (tool_calls.h).
  Result<std::string> render_prompt(const ChatRequest& req) const {
    if (chat->renders_tools()) return chat->apply(req.messages, true, req.tools.tools_json);
    std::vector<ChatMessage> messages = calls_as_text(req.messages);
    if (!req.tools.offered()) return chat->apply(messages, true);
    const std::string about = describe_tools(req.tools);
    if (!messages.empty() && messages.front().role == "system")
      messages.front().content += "\n\n" + about;
    else
      messages.insert(messages.begin(), ChatMessage{"system", about});
    return chat->apply(messages, true);
  }

  // A completion's prompt is its text as given (the vocabulary's BOS before it when the block
  // starts, where the vocabulary adds one), or its token ids; a chat's, its rendered messages.
  Plan plan(const ChatRequest& req, BlockId block, const std::string& have_text, int64_t have_tokens) const {
    Plan p;
    p.block = block;
    if (req.completion && !req.prompt_ids.empty()) {
      p.toks = req.prompt_ids;
      p.restart = have_tokens > 0;
      p.known = false;
      return p;
    }
    if (req.completion) {
      p.prompt = req.prompt_text;
    } else {
      auto prompt = render_prompt(req);
      if (!prompt) throw http_error(prompt.error());
      p.prompt = std::move(*prompt);
    }
    std::string_view delta = p.prompt;
    // Choices fork from the prompt's last token: at least one must be new.
    const bool reuse = !have_text.empty() && p.prompt.compare(0, have_text.size(), have_text) == 0 &&
                       (req.n == 1 || p.prompt.size() > have_text.size());
    if (reuse) {
      delta.remove_prefix(have_text.size());  // the conversation so far is in the block already
      p.have_tokens = have_tokens;
    } else {
      p.restart = have_tokens > 0;
    }
    p.toks = model->tokenizer.encode(std::string(delta),
                                     {.add_special = req.completion && !reuse, .parse_special = true});
    if (p.toks.empty() && p.have_tokens == 0)
      bad_request("`prompt` is empty: there is nothing to continue", "prompt");
    return p;
  }

  GatewayBackends backends;  // where programs run
  std::atomic<int64_t> served{0};

  // A choice beyond the first: a fork of the program's block, and the actor hearing its events.
  struct Fork {
    BlockId block = -1;
    std::shared_ptr<caf::scoped_actor> self;
  };

  // A request admitted to run: its program, its plan, and the actor that sent its generation
  // (which hears its events); with n > 1, its forks.
  struct Admitted {
    std::shared_ptr<GatewayBackend> backend;
    std::shared_ptr<TurnEnd> end;  // a streamed turn's (it ends the turn whatever happens)
    GatewayPrograms::Turn turn;
    Plan plan;
    std::shared_ptr<caf::scoped_actor> self;
    std::vector<Fork> forks;
  };

  // The forks' blocks go (their pages shared with the program's block go with the last holder).
  void free_forks(Admitted& a) {
    for (const Fork& f : a.forks)
      if (auto r = a.backend->programs->call(encode_free_block(0, f.block)); !r)
        spdlog::warn("gateway: freeing the fork block {} of `{}`: {}", f.block, a.turn.id, r.error().message);
    a.forks.clear();
  }

  // Waits on `self` for the end of the request it submitted (a forward).
  static Result<Reply> finished(caf::scoped_actor& self) {
    std::optional<Reply> done;
    while (!done)
      self->receive([&](event_atom, const std::vector<uint8_t>& f) {
        if (auto e = decode_reply(f); e && e->kind == ReplyKind::finished) done = std::move(*e);
      });
    if (done->reason == FinishReason::context_full) return make_error(Errc::out_of_memory, done->text);
    if (done->reason == FinishReason::error) return make_error(Errc::internal, done->text);
    return *done;
  }

  // Takes the program for a request, plans the request (counting the room it needs), and sends
  // it to the memory actor, returning once it runs: while its program is paused or short of
  // room it waits there for the scheduler (503 program_paused when that takes too long).
  // Before a streamed reply begins, so that a client gets that as an HTTP status.
  //
  // n > 1 (choices): the prompt but its last token runs into the program's block, which is then
  // forked n - 1 times (pages shared; each fork joins the program, so the room gate counts it);
  // each choice generates from that last token in its own block, the first in the program's,
  // with seed + its index.
  //
  // A turn resumed elsewhere (its node was lost under it) passes the tokens generated so far,
  // `resumed`: they follow the prompt in the new block, and what is left of max_tokens is
  // generated after them.
  // The request admitted on a backend; with several, a request that waited for room moves to
  // one with room (the global waiting queue, gateway_backends.h), up to kMaxMoves times.
  Admitted acquire(const ChatRequest& req, const std::vector<TokenId>& resumed = {}) {
    constexpr int kMaxMoves = 3;
    Moved moved;
    for (int moves = 0;; ++moves) {
      try {
        return acquire_on(req, resumed, moved, moves < kMaxMoves);
      } catch (Moved& m) {
        moved = std::move(m);
      }
    }
  }
  struct Moved {
    std::string from;                       // the node it left ("": none)
    std::shared_ptr<CarriedBlock> carried;  // its conversation's KV, when that travels
  };

  Admitted acquire_on(const ChatRequest& req, const std::vector<TokenId>& resumed, const Moved& moved,
                      bool may_move) {
    Admitted a;
    a.backend = backends.place(req.program_id, moved.from);
    GatewayPrograms* programs = a.backend->programs.get();
    a.turn = programs->begin(req.program_id);
    // A program that moved here with its KV: its new block gets it (else the turn recomputes).
    if (moved.carried && a.turn.tokens == 0 && !a.turn.ephemeral &&
        carry_in(*programs, a.turn.id, a.turn.block, *moved.carried, a.backend->name)) {
      a.turn.text = moved.carried->text;
      a.turn.tokens = static_cast<int64_t>(moved.carried->image.tokens.size());
      backends.carried(moved.carried->image.kv.size());
    }
    try {
      admit_turn(a, req, resumed, may_move);
    } catch (const ProgramMoved& m) {  // nothing of it ran: it was ended where it waited
      free_forks(a);
      backends.moved(a.turn.id, a.backend->name, m.waited_s);
      Moved next{a.backend->name, nullptr};
      if (!a.turn.ephemeral) {
        next.carried =
            carry_out(*programs, a.turn.id, a.turn.block, a.turn.text, opts.move_cost, a.backend->name);
        try {
          programs->release_by_client(a.turn.id);
        } catch (const HttpError&) {  // another request took it meanwhile: it stays
        }
      }
      throw next;
    }
    return a;
  }

  void admit_turn(Admitted& a, const ChatRequest& req, const std::vector<TokenId>& resumed, bool may_move) {
    GatewayPrograms* programs = a.backend->programs.get();
    bool first = may_move;  // the request's first command may move it: nothing of it ran before
    try {
      a.plan = plan(req, a.turn.block, a.turn.text, a.turn.tokens);
    } catch (...) {
      programs->end(a.turn.id);
      throw;
    }
    a.plan.toks.insert(a.plan.toks.end(), resumed.begin(), resumed.end());
    const int max_tokens = req.max_tokens - static_cast<int>(resumed.size());
    const int64_t need = a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size()) +
                         static_cast<int64_t>(req.n) * (max_tokens + (req.n > 1 ? kKvPageSize : 0));
    a.self = std::make_shared<caf::scoped_actor>(*sys);
    auto fail = [&](const Error& e) {
      free_forks(a);
      programs->end(a.turn.id);
      throw http_error(e);
    };
    if (a.plan.restart) {  // the history changed: start the block again
      auto r = programs->admit(
          *a.self, a.turn.id, need, [&](uint64_t rid) { return encode_clear_block(rid, a.plan.block); },
          std::exchange(first, false));
      if (!r) fail(make_error(r.error().code, "cannot clear the program's block: " + r.error().message));
      programs->count(0, 0, 0, a.turn.tokens);
    }
    StopCondition stop;
    stop.max_tokens = max_tokens;
    stop.strings = req.stop;
    std::vector<TokenId> prefill = a.plan.toks;
    if (req.n > 1) {
      prefill = {a.plan.toks.back()};
      const std::vector<TokenId> head(a.plan.toks.begin(), a.plan.toks.end() - 1);
      if (!head.empty()) {
        const Request fwd = Request::forward(a.plan.block, head, {a.plan.block});
        auto r = programs->admit(
            *a.self, a.turn.id, need, [&](uint64_t rid) { return encode_request(rid, fwd); },
            std::exchange(first, false));
        if (r && r->kind == ReplyKind::submitted) r = finished(*a.self);
        if (!r) fail(make_error(r.error().code, "the prompt failed: " + r.error().message));
      }
      const int64_t shared = a.plan.have_tokens + static_cast<int64_t>(head.size());
      for (int i = 1; i < req.n; ++i) {
        auto f = programs->call(encode_fork_block(0, a.plan.block, shared, "", a.turn.program));
        if (!f || f->kind != ReplyKind::block_info)
          fail(make_error(f ? Errc::internal : f.error().code, "cannot fork the prompt for choice " +
                                                                   std::to_string(i) + ": " +
                                                                   (f ? f->text : f.error().message)));
        a.forks.push_back({static_cast<BlockId>(f->id), std::make_shared<caf::scoped_actor>(*sys)});
      }
    }
    for (int i = 0; i < req.n; ++i) {
      SamplingParams sampling = req.sampling;
      sampling.seed += static_cast<uint64_t>(i);
      const BlockId b = i == 0 ? a.plan.block : a.forks[static_cast<size_t>(i - 1)].block;
      const Request gen = Request::generate(b, {b}, prefill, std::move(sampling), stop);
      caf::scoped_actor& self = i == 0 ? *a.self : *a.forks[static_cast<size_t>(i - 1)].self;
      auto r = programs->admit(
          self, a.turn.id, need, [&](uint64_t rid) { return encode_request(rid, gen); },
          std::exchange(first, false));
      if (!r) fail(make_error(r.error().code, "generation failed: " + r.error().message));
      if (r->kind != ReplyKind::submitted)
        fail(make_error(Errc::internal, "the batcher answered " + r->text));
    }
  }

  // One choice's reply as it comes: its tokens, text and logprobs, then how it finished.
  struct Outcome {
    std::string content;
    std::vector<ToolCall> calls;  // read from the content when the request offered tools
    std::string finish_reason;
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    std::string error;
    Errc code = Errc::internal;       // the error's class: out_of_memory (the KV pool ran out) is a 503
    std::vector<TokenId> ids;         // generated, over every attempt
    std::string raw;                  // their text
    bool eog = false;                 // it ended with the model's end-of-turn token
    Clock::time_point first_token{};  // when its first token came (the access log's)
    // With logprobs asked for: one entry per generated token but the end-of-turn one (its own,
    // then the alternatives).
    TokenLogprobs logprobs;
    // The error as a client gets it (error must be set).
    HttpError failure() const { return http_error(make_error(code, "generation failed: " + error)); }
  };
  // Called with each piece of text as it may go out, and the outcome so far (its logprobs).
  using OnText = std::function<bool(const std::string&, const Outcome&)>;

  // One generation's events on `self` until it finishes: its text through `stops` to `emit`, its
  // tokens and logprobs into `out`. Returns whether its node was lost under it.
  bool receive(caf::scoped_actor& self, Outcome& out, StopStrings& stops,
               const std::function<void(const std::string&)>& emit) const {
    bool finished = false, lost = false;
    while (!finished) {
      self->receive([&](event_atom, const std::vector<uint8_t>& f) {
        auto e = decode_reply(f);
        if (!e) return;
        if (e->kind == ReplyKind::token) {
          const bool end = e->token >= 0 && model->tokenizer.is_end_of_generation(e->token);
          if (e->token >= 0) out.ids.push_back(e->token);
          if (e->token >= 0 && out.first_token == Clock::time_point{}) out.first_token = Clock::now();
          if (end) out.eog = true;
          if (!end && !e->logprobs.empty()) out.logprobs.push_back(std::move(e->logprobs));
          out.raw += e->text;
          const std::string ready = stops.push(e->text);
          out.content += ready;
          emit(ready);
        } else if (e->kind == ReplyKind::finished) {
          finished = true;
          lost = e->node_lost;
          if (e->reason == FinishReason::error) out.error = e->text;
          // The pool ran out under the request (the policy counts each request's room, so this
          // takes pages it did not foresee): an error the client can retry, not a short "length".
          if (e->reason == FinishReason::context_full) {
            out.error = e->text;
            out.code = Errc::out_of_memory;
          }
          out.finish_reason = e->reason == FinishReason::max_tokens ? "length" : "stop";
        }
      });
    }
    return lost;
  }

  // The end of a choice: the text held back at a stop string's start goes out after all, and a
  // reply to a request with tools is read for its calls.
  void close(Outcome& out, const ChatRequest& req, StopStrings& stops,
             const std::function<void(const std::string&)>& emit) const {
    out.completion_tokens = static_cast<int64_t>(out.ids.size());
    const std::string tail = stops.flush();  // no stop string after all
    emit(tail);
    out.content += tail;
    const bool cut = out.finish_reason == "length" && req.tools.constrained();
    if (req.tools.active() && (out.finish_reason == "stop" || cut)) {
      ToolReply reply = read_tool_calls(out.content, req.tools, cut);
      if (!reply.calls.empty()) {
        out.content = std::move(reply.content);
        out.calls = std::move(reply.calls);
        out.finish_reason = "tool_calls";
      }
    }
  }

  // Runs the request's first choice on its program's block; calls `on_text` with each piece of
  // text as it comes. When the node under the turn is lost mid-generation (a cluster's backend),
  // the turn goes on on another node: a block of the prompt and the tokens generated so far,
  // then what is left of max_tokens. What the client got stays the turn's prefix; what follows
  // is what the new node's prefill computes (docs/cluster.md). `a` is then the new admission.
  // (A request of several choices is not moved: its forks are on the lost node.)
  Outcome generate(Admitted& a, const ChatRequest& req, const OnText& on_text) {
    Outcome out;
    const int64_t have_tokens = a.plan.have_tokens;  // of the first attempt: what the client is told
    out.cached_tokens = have_tokens;
    out.prompt_tokens = have_tokens + static_cast<int64_t>(a.plan.toks.size());
    bool client_gone = false;
    StopStrings stops(req.stop);
    auto emit = [&](const std::string& text) {
      if (client_gone || text.empty()) return;
      if (!on_text(text, out)) client_gone = true;
    };
    int64_t before = 0;  // tokens generated before the last attempt
    for (int attempt = 0;; ++attempt) {
      before = static_cast<int64_t>(out.ids.size());
      const bool lost = receive(*a.self, out, stops, emit);
      a.backend->programs->count(attempt == 0 ? static_cast<int64_t>(a.plan.toks.size()) : 0,
                                 static_cast<int64_t>(out.ids.size()) - before,
                                 attempt == 0 ? have_tokens : 0,
                                 attempt == 0 ? 0 : static_cast<int64_t>(a.plan.toks.size()));
      if (!lost || req.n > 1 || attempt >= 3 || static_cast<int>(out.ids.size()) >= req.max_tokens || out.eog)
        break;
      if (!resume(a, req, out.ids)) break;  // out.error stays: no node to go on on
      out.error.clear();
    }
    close(out, req, stops, emit);
    // The last attempt's block: what it found, its prompt (and the tokens of earlier attempts), what it made.
    const int64_t in_block =
        a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size()) + out.completion_tokens - before;
    // After an error, or with a prompt of token ids, the block's text is not known: empty text
    // makes the next request start it again.
    a.backend->programs->set_contents(
        a.turn.id,
        out.error.empty() && a.plan.known
            ? a.plan.prompt + out.raw +
                  (out.eog ? std::string(model->tokenizer.token_text(out.ids.back())) : "")
            : "",
        in_block);
    return out;
  }

  // Choice `i` (> 0) of a request of several: its fork's events, until it finishes.
  Outcome generate_fork(Admitted& a, const ChatRequest& req, int i, const OnText& on_text) {
    Outcome out;
    out.prompt_tokens = a.plan.have_tokens + static_cast<int64_t>(a.plan.toks.size());
    out.cached_tokens = a.plan.have_tokens;
    bool client_gone = false;
    StopStrings stops(req.stop);
    auto emit = [&](const std::string& text) {
      if (client_gone || text.empty()) return;
      if (!on_text(text, out)) client_gone = true;
    };
    if (receive(*a.forks[static_cast<size_t>(i - 1)].self, out, stops, emit) && out.error.empty())
      out.error = "the node went away";
    a.backend->programs->count(0, static_cast<int64_t>(out.ids.size()), 0, 0);
    close(out, req, stops, emit);
    return out;
  }

  // The turn's node was lost: the old turn ends there (its block is not known), and the turn is
  // admitted again on another node with the tokens so far. false (the error stands) when no node
  // will take it.
  bool resume(Admitted& a, const ChatRequest& req, const std::vector<TokenId>& ids) {
    a.backend->lost = true;
    spdlog::warn(
        "gateway: the node `{}` under program `{}` was lost after {} tokens: the turn goes on elsewhere",
        a.backend->name, a.turn.id, ids.size());
    a.backend->programs->set_contents(a.turn.id, "", 1);
    if (!a.end) a.backend->programs->end(a.turn.id);
    try {
      Admitted next = acquire(req, ids);
      next.end = a.end;
      if (next.end) {
        next.end->end();  // the old turn
        next.end->rebind(next.backend->programs, next.turn.id);
      }
      a = std::move(next);
      return true;
    } catch (const HttpError&) {
      return false;
    }
  }

  // A choice of a whole (not streamed) reply.
  json choice_json(const ChatRequest& req, const Outcome& o, size_t index, const std::string& echo) const {
    const bool lp = req.sampling.logprobs >= 0;
    if (req.completion) {
      int64_t offset = static_cast<int64_t>(echo.size());
      return {{"index", index},
              {"text", echo + o.content},
              {"logprobs", lp ? legacy_logprobs(model->tokenizer, o.logprobs, 0, o.logprobs.size(), offset)
                              : json(nullptr)},
              {"finish_reason", o.finish_reason}};
    }
    json message = {{"role", "assistant"}, {"content", o.content}};
    if (!o.calls.empty()) {
      if (o.content.empty()) message["content"] = nullptr;
      message["tool_calls"] = tool_calls_json(o.calls, false);
    }
    return {
        {"index", index},
        {"message", message},
        {"logprobs", lp ? chat_logprobs(model->tokenizer, o.logprobs, 0, o.logprobs.size()) : json(nullptr)},
        {"finish_reason", o.finish_reason}};
  }

  // Usage over the choices: the prompt once, every choice's completion.
  static json usage_json(const std::vector<Outcome>& os) {
    int64_t completion = 0;
    for (const Outcome& o : os) completion += o.completion_tokens;
    const Outcome& o = os.front();
    return {{"prompt_tokens", o.prompt_tokens},
            {"completion_tokens", completion},
            {"total_tokens", o.prompt_tokens + completion},
            {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
  }

  json completion_json(const ChatRequest& req, const std::string& rid, const std::string& id,
                       const std::vector<Outcome>& os, bool ephemeral, const std::string& echo) const {
    json choices = json::array();
    for (size_t i = 0; i < os.size(); ++i) choices.push_back(choice_json(req, os[i], i, echo));
    json r = {{"id", rid},
              {"object", req.completion ? "text_completion" : "chat.completion"},
              {"created", static_cast<int64_t>(std::time(nullptr))},
              {"model", model_name},
              {"choices", std::move(choices)},
              {"usage", usage_json(os)}};
    if (!ephemeral) r["program_id"] = id;
    return r;
  }

  // The prompt's text for `echo` (a prompt of token ids decoded).
  std::string echo_text(const ChatRequest& req) const {
    if (!req.echo) return "";
    return req.prompt_ids.empty() ? req.prompt_text : model->tokenizer.decode(req.prompt_ids);
  }

  // What names a reply and what it starts with, and its access-log record (arrival, admission).
  struct ReplyIds {
    std::string rid, echo;
    bool ephemeral = false;  // no program_id: the program ends with the turn
    AccessRecord log;
  };

  // The reply's access-log line, once its choices are done.
  void log_reply(AccessRecord rec, const Admitted& adm, const ChatRequest& req, const ReplyIds& ids,
                 const std::vector<Outcome>& os) const {
    rec.reply_id = ids.rid;
    rec.program = ids.ephemeral ? "" : adm.turn.id;
    if (adm.backend->name != "local") rec.backend = adm.backend->name;  // a coordinator's node
    rec.streamed = req.stream;
    for (const Outcome& o : os) {
      rec.completion_tokens += o.completion_tokens;
      rec.finish += (rec.finish.empty() ? "" : ",") + (o.error.empty() ? o.finish_reason : "error");
      if (o.first_token != Clock::time_point{} &&
          (rec.first_token == Clock::time_point{} || o.first_token < rec.first_token))
        rec.first_token = o.first_token;
    }
    if (!os.empty()) rec.prompt_tokens = os[0].prompt_tokens, rec.cached_tokens = os[0].cached_tokens;
    rec.done = Clock::now();
    log_access(rec);
    if (opts.trace) trace_request(rec);
  }

  // The request as a span of the trace's gateway process: from its arrival to its last token.
  void trace_request(const AccessRecord& rec) const {
    static std::atomic<int64_t> n{0};
    const int64_t id = ++n;
    Trace& t = *opts.trace;
    auto since = [&](Clock::time_point at) {
      return at == Clock::time_point{}
                 ? std::string("null")
                 : std::to_string(std::chrono::duration<double>(at - rec.arrived).count());
    };
    const std::string name = rec.method + " " + rec.path;
    t.async_begin("http", name, id, t.us_at(rec.arrived),
                  "{\"reply\":" + Trace::quote(rec.reply_id) + ",\"program\":" + Trace::quote(rec.program) +
                      ",\"node\":" + Trace::quote(rec.backend) + "}",
                  Trace::kGatewayPid);
    t.async_end("http", name, id, t.us_at(rec.done),
                "{\"status\":" + std::to_string(rec.status) +
                    ",\"prompt_tokens\":" + std::to_string(rec.prompt_tokens) +
                    ",\"cached_tokens\":" + std::to_string(rec.cached_tokens) +
                    ",\"completion_tokens\":" + std::to_string(rec.completion_tokens) +
                    ",\"finish\":" + Trace::quote(rec.finish) + ",\"admitted_s\":" + since(rec.admitted) +
                    ",\"first_token_s\":" + since(rec.first_token) + "}",
                Trace::kGatewayPid);
  }

  // POST /v1/chat/completions and /v1/completions.
  void on_generate(const httplib::Request& hreq, httplib::Response& res, bool completion) {
    if (const std::string why = backends.unavailable(); !why.empty())
      throw HttpError{503, error_body(why, "server_error", "", "not_leader")};
    const int n_vocab = static_cast<int>(model->tokenizer.vocab_size());
    const ChatRequest req =
        completion ? parse_completion_request(hreq.body, model_name, opts.max_tokens_limit, n_vocab)
                   : parse_chat_request(hreq.body, model_name, opts.default_max_tokens, opts.max_tokens_limit,
                                        n_vocab);
    AccessRecord rec;
    rec.method = hreq.method;
    rec.path = hreq.path;
    rec.arrived = Clock::now();
    Admitted adm = acquire(req);
    rec.admitted = Clock::now();
    ReplyIds ids{(completion ? "cmpl-" : "chatcmpl-") + std::to_string(++served) + "-" +
                     std::to_string(Clock::now().time_since_epoch().count() % 1000000),
                 echo_text(req), req.program_id.empty(), std::move(rec)};
    if (!req.stream) return reply_whole(adm, req, ids, res);
    // Streaming: the generation runs in the content provider (this worker thread).
    res.set_header("Cache-Control", "no-cache");
    auto turn = std::make_shared<StreamedTurn>(StreamedTurn{std::move(adm), req, std::move(ids), nullptr});
    turn->end = std::make_shared<TurnEnd>(turn->adm.backend->programs, turn->adm.turn.id);
    turn->adm.end = turn->end;
    res.set_chunked_content_provider("text/event-stream", [this, turn](size_t, httplib::DataSink& sink) {
      stream(*turn, sink);
      return true;
    });
  }

  void reply_whole(Admitted& adm, const ChatRequest& req, const ReplyIds& ids, httplib::Response& res) {
    const std::string id = adm.turn.id;
    std::vector<Outcome> os;
    const OnText quiet = [](const std::string&, const Outcome&) { return true; };
    try {
      os.push_back(generate(adm, req, quiet));
      for (int i = 1; i < req.n; ++i) os.push_back(generate_fork(adm, req, i, quiet));
    } catch (...) {
      free_forks(adm);
      adm.backend->programs->end(adm.turn.id);  // the turn's backend, after any resume
      throw;
    }
    free_forks(adm);
    adm.backend->programs->end(adm.turn.id);
    for (const Outcome& o : os)
      if (!o.error.empty()) throw o.failure();
    res.set_content(json_text(completion_json(req, ids.rid, id, os, ids.ephemeral, ids.echo)),
                    "application/json");
    log_reply(ids.log, adm, req, ids, os);
  }

  struct StreamedTurn {
    Admitted adm;
    ChatRequest req;
    ReplyIds ids;
    std::shared_ptr<TurnEnd> end;  // ends the turn whatever happens
  };

  // A streamed reply's chunks, as server-sent events.
  struct ChunkWriter {
    const StreamedTurn& t;
    const std::string& model_name;
    httplib::DataSink& sink;
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    // A chunk of choice `index`: a chat delta, or a completion's text.
    json chunk(size_t index, const json& delta, const json& logprobs, const json& finish_reason) const {
      json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
      if (t.req.completion)
        choice["text"] = delta.value("content", "");
      else
        choice["delta"] = delta;
      json c = {{"id", t.ids.rid},
                {"object", t.req.completion ? "text_completion" : "chat.completion.chunk"},
                {"created", created},
                {"model", model_name},
                {"choices", json::array({std::move(choice)})}};
      if (!t.ids.ephemeral) c["program_id"] = t.adm.turn.id;
      return c;
    }
    bool send(const json& j) const {
      const std::string line = "data: " + json_text(j) + "\n\n";
      return sink.write(line.data(), line.size());
    }
    bool send(size_t index, const json& delta, const json& logprobs = nullptr,
              const json& finish_reason = nullptr) const {
      return send(chunk(index, delta, logprobs, finish_reason));
    }
  };

  // The choices go out one after another, each with its index (a client sorts them by it). Every
  // choice runs to its end (a generation is never left writing a fork that is freed); once the
  // client is gone, or a choice failed, nothing more is sent.
  void stream(StreamedTurn& t, httplib::DataSink& sink) {
    const ChunkWriter w{t, model_name, sink};
    bool ok = true;
    std::string failure;
    std::vector<Outcome> os;
    for (int i = 0; i < t.req.n; ++i) stream_choice(t, w, i, ok, failure, os);
    free_forks(t.adm);
    t.end->end();
    if (!failure.empty()) {
      w.send(json::parse(failure));
    } else if (ok && t.req.include_usage) {
      json u = w.chunk(0, json::object(), nullptr, nullptr);
      u["choices"] = json::array();
      u["usage"] = usage_json(os);
      w.send(u);
    }
    const std::string done = "data: [DONE]\n\n";
    sink.write(done.data(), done.size());
    sink.done();
    AccessRecord rec = t.ids.log;
    if (!failure.empty()) rec.status = 500;  // the stream had begun: its error went out as an event
    log_reply(std::move(rec), t.adm, t.req, t.ids, os);
  }

  void stream_choice(StreamedTurn& t, const ChunkWriter& w, int i, bool& ok, std::string& failure,
                     std::vector<Outcome>& os) {
    const ChatRequest& req = t.req;
    const size_t index = static_cast<size_t>(i);
    size_t lp_sent = 0;                                        // logprobs entries sent with its chunks
    int64_t offset = static_cast<int64_t>(t.ids.echo.size());  // a completion's text_offset
    auto logprobs = [&](const Outcome& o) -> json {
      if (req.sampling.logprobs < 0) return nullptr;
      const size_t to = o.logprobs.size();
      json j = req.completion ? legacy_logprobs(model->tokenizer, o.logprobs, lp_sent, to, offset)
                              : chat_logprobs(model->tokenizer, o.logprobs, lp_sent, to);
      lp_sent = to;
      return j;
    };
    if (ok && !req.completion)
      ok = w.send(index, {{"role", "assistant"}, {"content", ""}});
    else if (ok && !t.ids.echo.empty())
      ok = w.send(index, {{"content", t.ids.echo}});
    ToolCallStream calls;  // with tools: text that may be a call is held until the reply ends
    const OnText on_text = [&](const std::string& text, const Outcome& so_far) {
      const std::string ready = req.tools.active() ? calls.push(text) : text;
      if (!ready.empty()) ok = ok && w.send(index, {{"content", ready}}, logprobs(so_far));
      return ok;
    };
    os.push_back(i == 0 ? generate(t.adm, req, on_text) : generate_fork(t.adm, req, i, on_text));
    const Outcome& o = os.back();
    if (!o.error.empty() && failure.empty()) failure = o.failure().body;
    if (!ok || !failure.empty()) return;
    // Tool calls as OpenAI streams them: per call, its id and name with empty arguments, then the
    // arguments; held text that was no call goes out as content.
    for (json& c : tool_calls_json(o.calls, true)) {
      const json args = c["function"]["arguments"];
      c["function"]["arguments"] = "";
      w.send(index, {{"tool_calls", json::array({c})}});
      w.send(index,
             {{"tool_calls", json::array({{{"index", c["index"]}, {"function", {{"arguments", args}}}}})}});
    }
    if (o.calls.empty() && !calls.held().empty()) w.send(index, {{"content", calls.held()}});
    // The logprobs of tokens whose text has not gone out (held back, or none) come last.
    const json rest = lp_sent < o.logprobs.size() ? logprobs(o) : json(nullptr);
    ok = w.send(index, json::object(), rest, o.finish_reason);
  }

  // With API keys: a request without one of them is answered 401 here, before any route.
  httplib::Server::HandlerResponse authorize(const httplib::Request& q, httplib::Response& r) const {
    if (opts.metrics_public && (q.path == "/metrics" || q.path == "/health"))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string header = q.get_header_value("Authorization");  // the token points into it
    const auto token = bearer_token(header);
    if (token && key_allowed(*token, opts.api_keys)) return httplib::Server::HandlerResponse::Unhandled;
    r.status = 401;
    r.set_header("WWW-Authenticate", "Bearer");
    r.set_content(error_body(token ? "Incorrect API key provided"
                                   : "No API key provided: send `Authorization: Bearer KEY`",
                             "invalid_request_error", "", "invalid_api_key"),
                  "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }

  void routes() {
    auto guarded = [this](auto handler) {
      return [this, handler](const httplib::Request& req, httplib::Response& res) {
        try {
          handler(req, res);
        } catch (const HttpError& e) {
          res.status = e.status;
          res.set_content(e.body, "application/json");
          log_refused(req.method, req.path, e.status, e.body);
        } catch (const std::exception& e) {
          res.status = 500;
          res.set_content(error_body(std::string("internal error: ") + e.what(), "server_error"),
                          "application/json");
          log_refused(req.method, req.path, 500, res.body);
        }
      };
    };
    svr.Post("/v1/chat/completions",
             guarded([this](const httplib::Request& q, httplib::Response& r) { on_generate(q, r, false); }));
    svr.Post("/v1/completions",
             guarded([this](const httplib::Request& q, httplib::Response& r) { on_generate(q, r, true); }));
    svr.Get(
        "/v1/models", guarded([this](const httplib::Request&, httplib::Response& r) {
          json m = {{"id", model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "chorus"}};
          r.set_content(json_text(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
        }));
    svr.Get("/programs", guarded([this](const httplib::Request&, httplib::Response& r) {
              r.set_content(json_text(backends.programs_json()), "application/json");
            }));
    svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& r) {
              r.set_content(backends.metrics_text() + (opts.more_metrics ? opts.more_metrics() : ""),
                            "text/plain; version=0.0.4");
            }));
    svr.Post("/programs/release", guarded([this](const httplib::Request& q, httplib::Response& r) {
               json j;
               try {
                 j = json::parse(q.body);
               } catch (const json::exception& e) {
                 bad_request(std::string("the body is not valid JSON: ") + e.what());
               }
               if (!j.is_object() || !j.contains("program_id") || !j["program_id"].is_string())
                 bad_request("`program_id` is required (a string)", "program_id");
               const std::string id = j["program_id"];
               const std::shared_ptr<GatewayBackend> b = backends.find(id);
               if (!b) throw program_not_found(id);
               b->programs->release_by_client(id);
               backends.forget(id);
               r.set_content(json_text(json{{"program_id", id}, {"released", true}}), "application/json");
             }));
    svr.Post("/programs/run", guarded([this](const httplib::Request& q, httplib::Response& r) {
               r.set_content(run_topology_request(*sys, *model, backends, q.body, opts.unsafe_tools),
                             "application/json");
             }));
    for (const GatewayRoute& route : opts.routes)
      svr.Get(route.path, guarded([route](const httplib::Request&, httplib::Response& r) {
                r.set_content(route.body(), route.content_type);
              }));
    svr.Get("/health", guarded([](const httplib::Request&, httplib::Response& r) {
              r.set_content(json_text(json{{"status", "ok"}}), "application/json");
            }));
    if (!opts.api_keys.empty())
      svr.set_pre_routing_handler([this](auto& q, auto& r) { return authorize(q, r); });
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413)
        res.set_content(error_body("the request body is too large", "invalid_request_error"),
                        "application/json");
      else if (res.status == 404)
        res.set_content(error_body("no route " + req.method + " " + req.path, "invalid_request_error"),
                        "application/json");
      else
        res.set_content(error_body("HTTP " + std::to_string(res.status), "invalid_request_error"),
                        "application/json");
    });
  }
};

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() {
  stop();
}

int Gateway::port() const {
  return impl_->port;
}

Result<std::unique_ptr<Gateway>> Gateway::start(caf::actor_system& sys, caf::actor batcher,
                                                const Model& model, GatewayOptions opts,
                                                ProgramManager* scheduler) {
  CHORUS_ASSIGN_OR_RETURN(auto gw, start_empty(sys, model, std::move(opts)));
  auto b = std::make_shared<GatewayBackend>();
  b->name = "local";
  b->programs = std::make_shared<GatewayPrograms>(sys, std::move(batcher), gw->impl_->opts, scheduler);
  gw->impl_->backends.add(std::move(b));
  return gw;
}

Result<std::unique_ptr<Gateway>> Gateway::start_empty(caf::actor_system& sys, const Model& model,
                                                      GatewayOptions opts) {
  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  impl->model = &model;
  if (!opts.chat_template.empty()) {
    auto text = [&](std::optional<TokenId> id) {
      return id ? std::string(model.tokenizer.token_text(*id)) : std::string();
    };
    auto t = ChatTemplate::from_source(opts.chat_template, text(model.tokenizer.bos()),
                                       text(model.tokenizer.eos()));
    if (!t) return make_error(t.error().code, "gateway: --chat-template: " + t.error().message);
    impl->chat = std::make_shared<ChatTemplate>(std::move(*t));
  } else if (model.chat) {
    impl->chat = std::make_shared<ChatTemplate>(*model.chat);
  } else {
    return make_error(model.chat_error.code, "gateway: " + model.chat_error.message);
  }
  impl->model_name = opts.model_name.empty() ? model.config.name : opts.model_name;
  impl->opts = std::move(opts);
  Impl* p = impl.get();
  p->backends.set_trace(p->opts.trace);
  p->svr.set_payload_max_length(p->opts.max_body_bytes);
  const int threads = p->opts.threads;
  p->svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  p->routes();
  p->port = bind_exclusively(p->svr, p->opts.host, p->opts.port);
  if (p->port <= 0)
    return make_error(Errc::io, "gateway: cannot bind " + p->opts.host + ":" +
                                    (p->opts.port == 0 ? "(any port)" : std::to_string(p->opts.port)));
  p->http = std::thread([p] { p->svr.listen_after_bind(); });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::add_backend(const std::string& name, caf::actor memory, int64_t pages,
                          std::function<int64_t()> room, int64_t host_pages, std::function<bool()> up) {
  auto b = std::make_shared<GatewayBackend>();
  b->name = name;
  GatewayOptions o = impl_->opts;
  o.policy.capacity_pages = pages;
  o.policy.host_capacity_pages = host_pages;  // what the node offers (--host-pages); 0: pauses drop
  // What a predecessor (a leader before this one) left on the node: its program ids are not
  // given again, and its HTTP programs are taken over below.
  std::vector<ProgramEntryData> found;
  {
    caf::scoped_actor self{*impl_->sys};
    if (auto r = ask(self, memory, encode_list_programs(0), std::chrono::seconds(5)); r)
      found = r->programs;
    else
      spdlog::warn("gateway: cannot list the programs on `{}`: {}", name, r.error().message);
  }
  uint64_t first_id = 1;
  for (const ProgramEntryData& e : found) first_id = std::max(first_id, e.program + 1);
  b->programs = std::make_shared<GatewayPrograms>(*impl_->sys, std::move(memory), o, nullptr, first_id);
  b->room = std::move(room);
  b->up = std::move(up);
  b->programs->set_room_elsewhere(
      [backends = &impl_->backends, name](int64_t pages) { return backends->room_elsewhere(name, pages); });
  if (!impl_->backends.add(b)) {
    b->programs->stop();  // stopping: it serves nothing
    return;
  }
  GatewayBackends& backends = impl_->backends;
  const auto elsewhere = [&backends, &name](const std::string& id) {
    auto at = backends.find(id);
    return at && at->name != name;
  };
  for (const std::string& id : b->programs->adopt(found, impl_->model->tokenizer, elsewhere))
    backends.place_at(id, b);
}

void Gateway::remove_backend(const std::string& name) {
  impl_->backends.remove(name);
}

std::map<std::string, GatewayCensus> Gateway::census() const {
  std::map<std::string, GatewayCensus> out;
  for (const auto& b : impl_->backends.all()) out[b->name] = b->programs->census();
  return out;
}

void Gateway::set_unavailable(const std::string& why) {
  impl_->backends.set_unavailable(why);
}

void Gateway::stop() {
  if (!impl_ || !impl_->http.joinable()) return;
  const auto all = impl_->backends.stop();
  for (const auto& b : all) b->programs->stop_waiting();  // requests waiting for a restore get their 503 now
  impl_->svr.stop();
  impl_->http.join();                             // requests in flight end
  for (const auto& b : all) b->programs->stop();  // then every program is released
}

}  // namespace chorus
