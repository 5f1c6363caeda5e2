// The gateway's HTTP session table (gateway/gateway.h): each program one block holding its
// conversation. The node's program scheduler (actors/program_manager.h) schedules them beside
// any other program of the node — pauses, restores, room — and this table keeps only what HTTP
// needs: which program and block a `program_id` names, what the block holds as text, whether a
// request is in flight, and the idle lease. Internal to the gateway library; its HTTP side is
// gateway.cpp. Every method is safe to call from any HTTP worker thread; a thread of its own
// expires idle programs.
//
// A request's life: begin() takes its program (from then on its client waits: a request
// boundary for the scheduler), admit() counts the room it will fill and sends its commands to
// the memory actor, where they wait while the program is paused or short of room (the scheduler
// hears of it and makes the room) — taken back after restore_wait_s; set_contents() records
// what the block holds, end() makes the program acting again (a one-shot program is released).
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "engine/step/block_store.h"
#include "gateway/gateway.h"
#include "gateway/openai_request.h"
#include "net/codec.h"

namespace chorus {

class ProgramManager;

// 404 `program_not_found` for a program_id no program has.
HttpError program_not_found(const std::string& id);

class GatewayPrograms {
 public:
  // `scheduler`: the node's (null: the gateway makes one over `batcher` from `opts`, whose
  // program ids start at `first_program_id`).
  GatewayPrograms(caf::actor_system& sys, caf::actor batcher, const GatewayOptions& opts,
                  ProgramManager* scheduler, uint64_t first_program_id = 1);
  ~GatewayPrograms();  // stop()

  // A command to the memory actor; its reply decoded (an Error reply is an error).
  Result<Reply> call(const Frame& f);

  // What a request starts from.
  struct Turn {
    std::string id;  // the program's id ("anon-N" for a one-shot program)
    BlockId block = -1;
    std::string text;    // what the block holds, as text ("" : nothing, or not known)
    int64_t tokens = 0;  // tokens in the block
    bool ephemeral = false;
    uint64_t program = 0;  // its id at the memory actor (forks of its block join it)
  };
  // Takes program `program_id` ("" : a new one-shot program) for a request, creating it (a
  // program registered with `hold`, its block, scheduled) when new. Throws HttpError: 500 when
  // it cannot be created, 409 when it has a request already.
  Turn begin(const std::string& program_id);
  // The request will fill the block up to `need_tokens` (400 context_length_exceeded when the
  // pool can never hold that). Then sends the command `make(request_id)` builds to the memory
  // actor and waits for its reply: at once when the program is resident with room, else once the
  // scheduler made it so. Taken back when that takes longer than restore_wait_s (or the gateway
  // stops): HttpError 503 `program_paused` (the program stays; the request is over). Called
  // once per command of the request (a clear of the block, then its generation), on `self`,
  // which then hears the command's events.
  //
  // With `may_move` (the request's first command: nothing of it has run), GatewayOptions::
  // migrate_after_s > 0 and a room_elsewhere test set: after each migrate_after_s of waiting, if
  // the test says another backend has room for the request, the request is over here (the program
  // acts again, a one-shot one is released) and admit() returns Errc::withdrawn: the gateway runs
  // it there. (A full pool, a refusal or a stopping gateway is another error or an HttpError.)
  Result<Reply> admit(caf::scoped_actor& self, const std::string& id, int64_t need_tokens,
                      const std::function<Frame(uint64_t request_id)>& make, bool may_move = false);
  // The global waiting queue's test (a gateway with several backends): whether another backend
  // has room for `pages` now.
  void set_room_elsewhere(std::function<bool(int64_t pages)> test);
  // What the block holds now ("" when not known: the next request starts it again).
  void set_contents(const std::string& id, std::string text, int64_t tokens);
  // The program's conversation is in `block` now (its common prefix kept in a fork of the old one).
  void set_block(const std::string& id, BlockId block);
  // The request is over: the program acts until its next one (one-shot programs are released).
  void end(const std::string& id);
  // POST /programs/release. Throws HttpError 404 (no such program) or 409 (a request in flight).
  void release_by_client(const std::string& id);

  // A coordinator that takes over (a new leader) finds the programs its predecessor left on the
  // node (ListPrograms): each HTTP program (registered with `hold`, one block, named by its
  // program_id) becomes a session again — its block's log read back and decoded with
  // `tokenizer` into the text it holds, so its next request reuses it; kept in host memory
  // (paused, offload) until that request; scheduled from now on. Every other program there (a
  // one-shot program, a topology program whose roles died with the predecessor, a program that
  // `elsewhere` says runs on another backend now) is terminated: its pages come back. Returns
  // the program_ids adopted.
  std::vector<std::string> adopt(const std::vector<ProgramEntryData>& found, const Tokenizer& tokenizer,
                                 const std::function<bool(const std::string& id)>& elsewhere);

  // Token counts for /metrics.
  void count(int64_t prompt, int64_t completion, int64_t reused, int64_t recomputed);

  // The KV pages its programs would hold were they all resident (their tokens, in pages), and
  // the pages it schedules them over: what a gateway with several backends places by.
  int64_t demand_pages() const;
  int64_t capacity_pages() const;
  // Where its commands go (the node's memory actor, or its link) and its program scheduler: a
  // topology program on this backend runs over them (gateway_topology.h).
  caf::actor memory() const;
  ProgramManager* scheduler() const;

  nlohmann::json list() const;       // GET /programs
  GatewayCensus census() const;      // (gateway.h)
  std::string metrics_text() const;  // GET /metrics

  void stop_waiting();  // requests waiting in admit() end (503); new ones do not wait
  void stop();          // stop_waiting(), ends the lease thread, releases every program (once)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
