// The gateway's programs (gateway/gateway.h): each one a block holding its conversation, paused
// and restored through the batcher as the program policy (engine/sched/program_policy.h) or a
// baseline decides. Internal to the gateway library; its HTTP side is gateway.cpp. Every method
// is safe to call from any HTTP worker thread; a scheduler thread of its own runs the periodic
// checks and expires idle programs.
//
// A request's life: begin() takes its program (reasoning from then on), wait_to_run() counts the
// room it will fill and blocks until the program is resident with that room counted (from then on
// it is pinned: never paused), set_contents() records what the block holds, end() makes the
// program acting again (a one-shot program is released).
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "engine/step/block_store.h"
#include "gateway/gateway.h"
#include "net/codec.h"

namespace chorus {

class GatewayPrograms {
 public:
  GatewayPrograms(caf::actor_system& sys, caf::actor batcher, const GatewayOptions& opts);
  ~GatewayPrograms();  // stop()

  // A command to the batcher; its reply decoded (an Error reply is an error).
  Result<Reply> call(const Frame& f);

  // What a request starts from.
  struct Turn {
    std::string id;  // the program's id ("anon-N" for a one-shot program)
    BlockId block = -1;
    std::string text;    // what the block holds, as text ("" : nothing, or not known)
    int64_t tokens = 0;  // tokens in the block
    bool ephemeral = false;
  };
  // Takes program `program_id` ("" : a new one-shot program) for a request, creating it (a
  // program and its block in the batcher) when new. Throws HttpError: 500 when it cannot be
  // created, 409 when it has a request already.
  Turn begin(const std::string& program_id);
  // The request will fill the block up to `need_tokens`. A request boundary for the policy; then
  // waits (up to restore_wait_s) until the program is resident and its room counted. Throws
  // HttpError 503 when that does not happen in time (the program stays, its request is over).
  void wait_to_run(const std::string& id, int64_t need_tokens);
  // What the block holds now ("" when not known: the next request starts it again).
  void set_contents(const std::string& id, std::string text, int64_t tokens);
  // The request is over: the program acts until its next one (one-shot programs are released).
  void end(const std::string& id);
  // POST /programs/release. Throws HttpError 404 (no such program) or 409 (a request in flight).
  void release_by_client(const std::string& id);

  // Token counts for /metrics.
  void count(int64_t prompt, int64_t completion, int64_t reused, int64_t recomputed);
  int64_t requests_served() const;

  nlohmann::json list() const;       // GET /programs
  std::string metrics_text() const;  // GET /metrics

  void stop_waiting();  // requests waiting in wait_to_run() end (503); new ones do not wait
  void stop();          // stop_waiting(), ends the scheduler thread, releases every program (once)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
