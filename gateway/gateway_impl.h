// Gateway::Impl (gateway/gateway.h): the HTTP server's state and its steps, shared by the two
// files that define them — gateway.cpp (admission: a request's program, plan and room; routes)
// and gateway_reply.cpp (generation, whole and streamed replies, the access log). Internal to
// gateway/.
#pragma once

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
#include <variant>

#include "actors/atoms.h"
#include "actors/submit.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "engine/step/trace.h"
#include "engine/tokenizer/chat_template.h"
#include "gateway/access_log.h"
#include "gateway/auth.h"
#include "gateway/gateway_backends.h"
#include "gateway/gateway_moves.h"
#include "gateway/gateway_programs.h"
#include "gateway/gateway_topology.h"
#include "gateway/http_listen.h"
#include "gateway/openai_request.h"
#include "gateway/openai_response.h"
#include "gateway/tool_calls.h"
#include "net/codec.h"

namespace chorus {

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
    int64_t keep = 0;         // ... but for this many tokens, which start the new prompt too
    bool known = true;        // the prompt's text is known (not for a prompt of token ids)
  };

  // The request's messages through the chat template, with its tools: given to the template
  // where it shows them to the model, else described in a system turn of chorus's own.
  // A template that knows no tools gets the history's calls and results as text, in the format
  // chorus's system turn teaches (tool_calls.h).
  Result<std::string> render_prompt(const ChatRequest& req) const;

  // A completion's prompt is its text as given (the vocabulary's BOS before it when the block
  // starts, where the vocabulary adds one), or its token ids; a chat's, its rendered messages.
  Plan plan(const ChatRequest& req, BlockId block, const std::string& have_text, int64_t have_tokens) const;

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
  void free_forks(Admitted& a);

  // Waits on `self` for the end of the request it submitted (a forward).
  static Result<Reply> finished(caf::scoped_actor& self);

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
  Admitted acquire(const ChatRequest& req, const std::vector<TokenId>& resumed = {});
  struct Moved {
    std::string from;                       // the node it left ("": none)
    std::shared_ptr<CarriedBlock> carried;  // its conversation's KV, when that travels
  };

  // On one backend: admitted, or moved (its first command was withdrawn where it waited and
  // another backend has room: where it left, and its conversation's KV when that travels).
  std::variant<Admitted, Moved> acquire_on(const ChatRequest& req, const std::vector<TokenId>& resumed,
                                           const Moved& moved, bool may_move);

  // The turn's commands admitted on a.backend; false when the first was withdrawn to move.
  bool admit_turn(Admitted& a, const ChatRequest& req, const std::vector<TokenId>& resumed, bool may_move);
  // A changed history (a.plan.restart): the longest prefix of the block's log whose text starts
  // the new prompt is kept (a.plan.keep, have_tokens) and only the rest is prefilled.
  void keep_common_prefix(Admitted& a, const ChatRequest& req) const;

  // One choice's reply as it comes: its tokens, text and logprobs, then how it finished.
  struct Outcome {
    std::string content;
    std::vector<ToolCall> calls;  // read from the content when the request offered tools
    std::string cut_call;         // a call max_tokens cut off after `calls` (finish_reason length)
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
               const std::function<void(const std::string&)>& emit) const;

  // The end of a choice: the text held back at a stop string's start goes out after all, and a
  // reply to a request with tools is read for its calls.
  void close(Outcome& out, const ChatRequest& req, StopStrings& stops,
             const std::function<void(const std::string&)>& emit) const;

  // Runs the request's first choice on its program's block; calls `on_text` with each piece of
  // text as it comes. When the node under the turn is lost mid-generation (a cluster's backend),
  // the turn goes on on another node: a block of the prompt and the tokens generated so far,
  // then what is left of max_tokens. What the client got stays the turn's prefix; what follows
  // is what the new node's prefill computes (docs/cluster.md). `a` is then the new admission.
  // (A request of several choices is not moved: its forks are on the lost node.)
  Outcome generate(Admitted& a, const ChatRequest& req, const OnText& on_text);

  // Choice `i` (> 0) of a request of several: its fork's events, until it finishes.
  Outcome generate_fork(Admitted& a, const ChatRequest& req, int i, const OnText& on_text);

  // The turn's node was lost: the old turn ends there (its block is not known), and the turn is
  // admitted again on another node with the tokens so far. false (the error stands) when no node
  // will take it.
  bool resume(Admitted& a, const ChatRequest& req, const std::vector<TokenId>& ids);

  // A choice of a whole (not streamed) reply.
  json choice_json(const ChatRequest& req, const Outcome& o, size_t index, const std::string& echo) const;

  // Usage over the choices: the prompt once, every choice's completion.
  static json usage_json(const std::vector<Outcome>& os);

  json completion_json(const ChatRequest& req, const std::string& rid, const std::string& id,
                       const std::vector<Outcome>& os, bool ephemeral, const std::string& echo) const;

  // The prompt's text for `echo` (a prompt of token ids decoded).
  std::string echo_text(const ChatRequest& req) const;

  // What names a reply and what it starts with, and its access-log record (arrival, admission).
  struct ReplyIds {
    std::string rid, echo;
    bool ephemeral = false;  // no program_id: the program ends with the turn
    AccessRecord log;
  };

  // The reply's access-log line, once its choices are done.
  void log_reply(AccessRecord rec, const Admitted& adm, const ChatRequest& req, const ReplyIds& ids,
                 const std::vector<Outcome>& os) const;

  // The request as a span of the trace's gateway process: from its arrival to its last token.
  void trace_request(const AccessRecord& rec) const;

  // POST /v1/chat/completions and /v1/completions.
  void on_generate(const httplib::Request& hreq, httplib::Response& res, bool completion);
  // The Anthropic Messages API (gateway_messages.cpp): the request read into the chat request it
  // means, its reply (whole, or its events) in Anthropic's shape, errors in Anthropic's shape.
  void on_messages(const httplib::Request& hreq, httplib::Response& res);
  void on_count_tokens(const httplib::Request& hreq, httplib::Response& res);
  ChatRequest messages_request(const std::string& body) const;
  json message_json(const ChatRequest& req, const std::string& id, const Outcome& o) const;
  static std::string anthropic_error(const HttpError& e);

  void reply_whole(Admitted& adm, const ChatRequest& req, const ReplyIds& ids, httplib::Response& res);

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
  void stream(StreamedTurn& t, httplib::DataSink& sink);
  void stream_messages(StreamedTurn& t, httplib::DataSink& sink);  // gateway_messages.cpp
  // One choice generated whole, its turn ended; a failed generation is thrown as its HttpError.
  Outcome generate_whole(Admitted& adm, const ChatRequest& req);
  // A streamed turn's generation: its text through `out` as it may go out (held while it may be
  // a tool call; what was held goes out when it holds none), the turn ended whatever happens.
  // A refusal or a failed generation goes to `failed` instead (nullopt).
  std::optional<Outcome> run_streamed(StreamedTurn& t, const std::function<bool(const std::string&)>& out,
                                      const std::function<void(const HttpError&)>& failed);
  // A request admitted on its backend, with its reply's ids (`id_prefix` + a serial) and access record.
  std::pair<Admitted, ReplyIds> admit_request(const httplib::Request& hreq, const ChatRequest& req,
                                              const std::string& id_prefix);
  // A streamed reply: `write` runs the turn and sends its events from the content provider.
  void stream_reply(Admitted adm, const ChatRequest& req, ReplyIds ids, httplib::Response& res,
                    std::function<void(StreamedTurn&, httplib::DataSink&)> write);

  // The Responses API (gateway_responses.cpp): a request read into the chat request it means
  // after its previous response's stored conversation; its response object or events; the store
  // GET and DELETE /v1/responses/{id} read (the newest GatewayOptions::stored_responses of store: true).
  struct StoredResponse;
  struct ResponseTurn {
    std::string id, previous, program;  // program: its chain's ("" for a store: false one alone)
    bool store = true;
    ChatRequest req;
    nlohmann::ordered_json conversation;  // the chat messages it ran on, without its instructions
    nlohmann::ordered_json echo;          // the request's settings, as the response object repeats them
  };
  ResponseTurn responses_request(const std::string& body);
  json response_json(const ResponseTurn& t, const Outcome& o, nlohmann::ordered_json* added) const;
  void store_response(const ResponseTurn& t, const json& object, const nlohmann::ordered_json& added);
  void on_responses(const httplib::Request& hreq, httplib::Response& res);
  void stream_response(ResponseTurn& t, StreamedTurn& st, httplib::DataSink& sink);
  void on_stored_response(const httplib::Request& q, httplib::Response& res, bool remove);
  std::mutex responses_m;
  std::map<std::string, std::shared_ptr<StoredResponse>> responses;
  std::deque<std::string> response_order;

  void stream_choice(StreamedTurn& t, const ChunkWriter& w, int i, bool& ok, std::string& failure,
                     std::vector<Outcome>& os);

  // With API keys: a request without one of them is answered 401 here, before any route.
  httplib::Server::HandlerResponse authorize(const httplib::Request& q, httplib::Response& r) const;

  void routes();
};

}  // namespace chorus
