// The HTTP gateway: an OpenAI-compatible API in front of a batcher, with programs.
//
//   POST /v1/chat/completions   chat completions, streamed (SSE) or not, with usage counts; a
//                               `program_id` (top level, or in `extra_body`) makes the request
//                               part of a program: its conversation stays in the program's
//                               block between requests, and a request that repeats the
//                               history only runs what is new; n > 1 choices are forks of the
//                               prompt's block; logprobs, penalties, logit_bias
//   POST /v1/completions        the same for a prompt given as text or token ids (no chat
//                               template), OpenAI's legacy shape
//   GET  /v1/models             the one model served
//   POST /programs/release      {"program_id": ...}: the program ends, its blocks are freed
//   GET  /programs              each program: tokens, pages, state, phase, idle time
//   GET  /metrics               Prometheus text: resident pages, paused programs, recomputed and
//                               reused tokens, KV hit rate, requests per minute
//   GET  /health                {"status": "ok"} while it serves
//
// With API keys (GatewayOptions::api_keys), every route asks for `Authorization: Bearer KEY`
// (one of them; compared in constant time): without it, 401 with an OpenAI-style body (code
// `invalid_api_key`) and `WWW-Authenticate: Bearer`. /metrics and /health too, unless
// `metrics_public`.
//
// Between requests a program is *acting* (its client is running tools); with a request in flight
// it is *reasoning*. The node's program scheduler (actors/program_manager.h) schedules the
// gateway's programs beside any other of the node: a request waits in the memory actor until its
// program is resident with room for all it may write (its prompt and max_tokens), so a request
// never runs out of KV pages half-way; it is taken back after restore_wait_s (503). Idle programs
// expire after a lease. The HTTP session table is gateway/gateway_programs.h; where programs run
// (one backend, or one per node behind a coordinator) gateway/gateway_backends.h.
//
// Bad requests get OpenAI-style JSON errors: 400 (malformed JSON, bad fields, with `param`), 404
// (unknown model or program), 409 (a program already has a request in flight), 413 (body too
// large), 503 (`program_paused`: the program could not be restored in time; `kv_cache_full`: the
// pool ran out under a request anyway — the reply is not a short "length").
#pragma once

#include <caf/fwd.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/sched/program_policy.h"
#include "gateway/gateway_moves.h"

namespace chorus {

class Trace;

struct Model;
class ActorPlacement;
class ProgramManager;

// A GET route more (a coordinator's /cluster): `body` answers it, on an HTTP worker thread.
struct GatewayRoute {
  std::string path;
  std::string content_type = "application/json";
  std::function<std::string()> body;
};

// A backend's programs as its scheduler last saw them — resident or paused (every program it
// schedules on the node: HTTP and topology ones) — and its requests waiting now for room or a
// restore (the global queue's, in a cluster).
struct GatewayCensus {
  int64_t resident = 0, paused = 0, waiting = 0;
};

struct GatewayOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0: any free port (see Gateway::port())
  std::string model_name;  // as /v1/models lists it ("" : the model's own name)
  size_t max_body_bytes = 1 << 20;
  int default_max_tokens = 256;
  int max_tokens_limit = 4096;
  double lease_s = 600;            // an idle program is released after this long
  double restore_wait_s = 300;     // a request for a paused program waits this long at most
  size_t stored_responses = 4096;  // /v1/responses with store: the newest this many are kept
  // Several backends (a coordinator): a request that waited this long for room on its node moves
  // to a node with room for it (the global waiting queue); 0: it waits where it is.
  double migrate_after_s = 0;
  // How a program that moves for room takes its conversation along (gateway/gateway_moves.h):
  // by KV transfer when the cost model finds it cheaper than recomputing it on the other node,
  // or always one way. Where the KV cannot travel (dropped by a pause, say) it is recomputed.
  MoveCost move_cost;
  // HTTP worker threads: the requests handled at once. A request waiting for its program's
  // restore holds one, and so does an idle keep-alive connection (a few seconds); requests beyond
  // them wait in a queue the scheduler does not see — their programs look idle and get paused.
  int threads = 128;
  ProgramPolicyOptions policy;  // capacity_pages: the engine's KV pages (with the gateway's own scheduler)
  SchedulingMode mode = SchedulingMode::program;  // ... and its policy
  double ttl_s = 2.0;                 // SchedulingMode::ttl: how long an idle program stays pinned
  std::vector<std::string> api_keys;  // empty: no authentication
  bool metrics_public = false;        // /metrics and /health without a key
  std::vector<GatewayRoute> routes;   // more GET routes (behind the same keys)
  bool unsafe_tools = false;  // POST /programs/run: tools run where the sandbox's isolation is missing
  // POST /programs/run: where sinks and tool sandboxes with a `node:` key run (a coordinator's
  // nodes, actors/actor_placement.h). Null: with the program, whatever the placement says.
  std::shared_ptr<ActorPlacement> placement;
  std::function<std::string()> more_metrics;  // appended to /metrics (Prometheus text)
  // The Jinja text prompts are rendered with (--chat-template FILE), with the model's BOS and
  // EOS; "": the model's own template. One that does not parse fails start().
  std::string chat_template;
  // Each completion request as a span of the trace's `gateway` process, and (a coordinator) where
  // programs were placed on its `cluster` process (engine/step/trace.h). Null: not traced.
  std::shared_ptr<Trace> trace;
};

class Gateway {
 public:
  // Binds and starts serving on its own threads. `scheduler`: the node's program scheduler, which
  // then schedules the gateway's programs beside the node's others (it must outlive the
  // gateway); null: the gateway makes one of its own over `batcher` from opts.policy, mode and
  // ttl_s. Errors: the address cannot be bound.
  static Result<std::unique_ptr<Gateway>> start(caf::actor_system& sys, caf::actor batcher,
                                                const Model& model, GatewayOptions opts,
                                                ProgramManager* scheduler = nullptr);
  // A gateway in front of a cluster (a coordinator): it starts with no backend (requests are
  // 503 `no_node` until one is added) and places each program on one of the backends added.
  static Result<std::unique_ptr<Gateway>> start_empty(caf::actor_system& sys, const Model& model,
                                                      GatewayOptions opts);
  ~Gateway();  // stop()

  // A backend more, named `name` (a node): its programs' commands go to `memory` (a node's
  // memory actor, or a link to it: cluster/node_link.h), scheduled over its `pages` by a scheduler
  // of the gateway's own, which may offload paused programs to `host_pages` of the node's host
  // memory (0: pauses drop). A new program goes to
  // the backend whose `room()` (its free KV pages now) is largest, fewer programs breaking ties,
  // and stays there while it is there. A backend added again under the same name replaces it.
  void add_backend(const std::string& name, caf::actor memory, int64_t pages, std::function<int64_t()> room,
                   int64_t host_pages = 0, std::function<bool()> up = nullptr);
  // A turn whose backend's node is lost under it (its request finishes with node_lost: net/codec.h)
  // goes on on another backend: the prompt and the tokens so far are prefilled there, then the
  // rest of max_tokens; the client's reply or stream is whole. That backend takes no new program.
  //
  // remove_backend: its waiting requests end (503) and its programs are forgotten: the next request of each
  // starts again on another backend (the client's history is the program's truth; the new block
  // is prefilled from it).
  void remove_backend(const std::string& name);
  // While `why` is not empty, chat completions are refused with 503 `not_leader` and `why` as the
  // message (a standby coordinator says where the leader is).
  void set_unavailable(const std::string& why);
  // Each backend's programs and waiting requests, by backend name (GET /cluster).
  std::map<std::string, GatewayCensus> census() const;

  int port() const;
  void stop();  // stops serving, releases every program

 private:
  struct Impl;
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
