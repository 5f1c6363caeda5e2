// The program-aware scheduler over topology programs that share one engine (`chorus run` with
// several programs): ProgramPolicy (engine/sched/program_policy.h) run every check period and at each
// phase change, fed with exact numbers from the batcher, its pauses and restores carried out
// there. docs/scheduling.md "Topology programs" tells the rules; here is where they are applied.
//
//  - A program is managed from its start: registered with `hold` and paused while its blocks are
//    still empty, so that its first requests (its blocks' initial texts) wait in the batcher until
//    the manager admits it — a new program joins the restore queue like a paused one, with the
//    pages its start will take (`need_pages`).
//  - Its phase: reasoning while a request of it is in the engine or held for its restore (it
//    wants the engine now); acting otherwise. Acting in a tool call — from a `NAME.tool_call`
//    event to the matching `NAME.tool_result`, several at once possible — its pages weigh less
//    the longer the tool runs (the policy's time decay); acting while it waits for an event
//    (input, another role), they weigh fully. A paused program comes back only once it wants the
//    engine: its held request says so.
//  - Pages: its resident pages (ProgramStatus) or, paused, those it had (a restore needs them
//    back), plus `wanted_pages`: what its requests in the engine may still write and what those
//    waiting need to start. The batcher starts a request of a program registered with `hold`
//    only with room for all it may write (and restores only into room running requests will not
//    take), so the pool never runs out under a role; the manager makes that room. A program with
//    a request in the engine (`pending`) is pinned.
//  - Its tools' environment (its sandbox): removed while it is paused, waiting for an event
//    and in no tool call, past the idle lease (`cool`); made again when it reaches the first
//    `prewarm_depth` places of the restore queue, or at its restore at the latest (`warm`).
//  - When it checks: every check period, at each tool call and result, when a program is added
//    or ends, and whenever the batcher says a request of a scheduled program waits (held for its
//    restore, or for room: the manager registers with the batcher to hear it).
//  - Pauses go first, then restores (a restore needs the room the pauses make). A pause the
//    batcher refuses (a request arrived in between) or a restore that does not fit is counted and
//    tried again at the next check.
//
// The manager runs on a thread of its own and talks to the batcher as any client does; it never
// blocks the programs' actors. Thread-safe.
#pragma once

#include <caf/fwd.hpp>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/sched/program_policy.h"

namespace chorus {

struct ProgramManagerStats {
  int64_t programs = 0;  // managed now
  int64_t pauses = 0, restores = 0;
  int64_t admitted = 0;             // programs let in (their first restore)
  int64_t refused = 0;              // pauses or restores the batcher refused (retried later)
  int64_t recomputed_tokens = 0;    // tokens prefilled again by restores of dropped programs
  int64_t offloaded_pauses = 0;     // pauses that kept the pages in host memory
  int64_t tools_cooled = 0;         // tool environments removed past the idle lease
  int64_t tools_prewarmed = 0;      // ... made again ahead of the program's restore
  int64_t tools_warmed_late = 0;    // ... made again only at its restore
  int64_t peak_resident_pages = 0;  // the most pages the managed programs held at a check
  int64_t checks = 0;
};

// A program's tool environment, as the manager drives it (both called from its thread; they
// must not block).
struct ProgramTools {
  std::function<void()> cool;  // remove it
  std::function<void()> warm;  // make it again
};

class ProgramManager {
 public:
  // `opts.capacity_pages` is the pool the programs share. Starts the manager's thread, which
  // checks every `opts.check_period_s` and when poked; with a period of 0 there is no thread and
  // only check() checks (tests, or an embedding that drives it from a loop of its own).
  // `tool_lease_s`: how long a paused program's tool environment stays while nothing needs it.
  ProgramManager(caf::actor_system& sys, caf::actor batcher, ProgramPolicyOptions opts,
                 double tool_lease_s = 60);
  ~ProgramManager();  // stops the thread (programs still managed stay as they are)
  ProgramManager(const ProgramManager&) = delete;
  ProgramManager& operator=(const ProgramManager&) = delete;

  // A program registered with `hold` is scheduled from now on. `need_pages`: what it takes when
  // it is admitted (its initial texts and first turn), used while it has never been resident.
  // `tools`: its tool environment's hooks, when it has tools. False (nothing done) once
  // abandon_waiting() has run: no program starts any more.
  bool add(uint64_t program, int64_t need_pages, ProgramTools tools = {});
  // Its start is over (Program::start returned it): abandon_waiting() leaves it alone.
  void started(uint64_t program);
  // It ends: no longer scheduled. Call before terminating it (a check under way finishes
  // first), and check_now() once it is terminated: its room may let another program in.
  // Returns false when it was no longer scheduled (abandoned: already terminated).
  bool remove(uint64_t program);
  // Its roles' tool calls (from the NAME.tool_call / NAME.tool_result events).
  void tool_started(uint64_t program);
  void tool_ended(uint64_t program);

  // Ends the programs whose start is not over — waiting to be admitted, or to write their
  // initial texts (Ctrl-C, or another program failed to start): each is terminated in the
  // batcher, its requests cancelled, so its start fails; and no program is added after.
  void abandon_waiting();

  void check_now();  // a check at once, on the manager's thread (phase changes ask for one)
  void check();      // a check on the caller's thread (tests); returns when it is carried out

  ProgramManagerStats stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the actor that hears the batcher
};

}  // namespace chorus
