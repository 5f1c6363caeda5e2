// The program scheduler of a node: one actor that runs the program policy
// (engine/sched/program_policy.h) — or, for the benchmark, one of its LRU/TTL baselines — over
// every program the node schedules, whether it came from `chorus run` (a topology program) or
// from `chorus serve` (an HTTP program of the gateway): the same table, the same room counting,
// the same pauses and restores. docs/scheduling.md tells the rules; here is where they are
// applied. ProgramManager is the handle its clients hold; every call is a message to the actor.
//
//  - A program is scheduled from its start: registered with `hold` and paused while its blocks
//    are still empty, so that its first requests wait in the memory actor until the scheduler
//    admits it — a new program joins the restore queue like a paused one, with the pages its
//    start will take (`need_pages`).
//  - Its phase: reasoning while a request of it is in the engine or held for its restore (it
//    wants the engine now); acting otherwise. Acting in a tool call — a topology role's
//    `NAME.tool_call` to its `NAME.tool_result` (several at once possible), or an HTTP program
//    between two requests (its client runs the tools) — its pages weigh less the longer the tool
//    runs (the policy's time decay); acting while it waits for an event (input, another role),
//    they weigh fully. A paused program comes back only once it wants the engine: its held
//    request says so.
//  - Pages: its resident pages (ProgramStatus) or, paused, those it had (a restore needs them
//    back), plus `wanted_pages`: what its requests in the engine may still write and what those
//    waiting need to start. The memory actor starts a request of a program registered with
//    `hold` only with room for all it may write (and restores only into room running requests
//    will not take), so the pool never runs out under a program; the scheduler makes that room.
//    A program with a request in the engine (`pending`) is pinned.
//  - Its tools' environment (a topology program's sandbox): removed while it is paused, waiting
//    for an event and in no tool call, past the idle lease (`cool`); made again when it reaches
//    the first `prewarm_depth` places of the restore queue, or at its restore at the latest.
//  - When it checks: every check period, and — once its mailbox is empty, so that a burst of
//    news makes one check — after a program is added or ends, at each tool call and result, and
//    whenever the memory actor says a request of a scheduled program waits (held for its
//    restore, or for room).
//  - Pauses go first, then restores (a restore needs the room the pauses make). A pause the
//    memory actor refuses (a request arrived in between) or a restore that does not fit is
//    counted and tried again at the next check.
//
// The actor has a thread of its own (a blocking actor: it waits for the memory actor's answers
// during a check) and talks to the memory actor as any client does; it never blocks a
// program's actors. The handle is thread-safe.
#pragma once

#include <atomic>
#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/sched/program_policy.h"

namespace chorus {

struct ProgramManagerStats {
  int64_t programs = 0;  // scheduled now
  int64_t pauses = 0, restores = 0;
  int64_t admitted = 0;             // programs let in (their first restore)
  int64_t refused = 0;              // pauses or restores the memory actor refused (retried later)
  int64_t recomputed_tokens = 0;    // tokens prefilled again by restores of dropped programs
  int64_t offloaded_pauses = 0;     // pauses that kept the pages in host memory
  int64_t tools_cooled = 0;         // tool environments removed past the idle lease
  int64_t tools_prewarmed = 0;      // ... made again ahead of the program's restore
  int64_t tools_warmed_late = 0;    // ... made again only at its restore
  int64_t peak_resident_pages = 0;  // the most pages the scheduled programs held at a check
  int64_t resident_pages = 0;       // ... at the last check, and after the moves it made
  int64_t checks = 0;
};

// One scheduled program, as the scheduler last saw it (for /programs and /metrics).
struct ScheduledProgram {
  uint64_t id = 0;
  bool admitted = false;   // resident at least once
  bool paused = false;     // paused (a program never admitted is paused too)
  bool offloaded = false;  // paused, its pages in host memory
  int64_t pages = 0;       // resident, or (paused) what it had
  int64_t tokens = 0;
  int64_t pauses = 0, restores = 0;  // the scheduler's moves of it (its admission apart)
};

// A program's tool environment, as the scheduler drives it (both called from its thread; they
// must not block).
struct ProgramTools {
  std::function<void()> cool;  // remove it
  std::function<void()> warm;  // make it again
};

struct SchedulerOptions {
  ProgramPolicyOptions policy;  // capacity_pages: the pool the programs share
  SchedulingMode mode = SchedulingMode::program;
  double ttl_s = 2.0;             // SchedulingMode::ttl: how long an idle program stays pinned
  double tool_lease_s = 60;       // how long a paused program's tool environment stays unneeded
  uint64_t first_program_id = 1;  // new_program_id() counts from here
};

class ProgramManager {
 public:
  // Spawns the scheduler for the programs on `memory` (the node's memory actor, or a batcher).
  // It checks every `opts.policy.check_period_s` and on news; with a period of 0 it checks only
  // when check() says so (tests, or an embedding that drives it from a loop of its own).
  ProgramManager(caf::actor_system& sys, caf::actor memory, SchedulerOptions opts);
  ProgramManager(caf::actor_system& sys, caf::actor memory, ProgramPolicyOptions opts,
                 double tool_lease_s = 60);
  ~ProgramManager();  // stops the actor (programs still scheduled stay as they are)
  ProgramManager(const ProgramManager&) = delete;
  ProgramManager& operator=(const ProgramManager&) = delete;

  // A program registered with `hold` is scheduled from now on. `need_pages`: what it takes when
  // it is admitted, used while it has never been resident. `tools`: its tool environment's
  // hooks, when it has tools. False (nothing done) once abandon_waiting() has run: no program
  // starts any more.
  bool add(uint64_t program, int64_t need_pages, ProgramTools tools = {});
  // Its start is over (Program::start returned it): abandon_waiting() leaves it alone.
  void started(uint64_t program);
  // It ends: no longer scheduled. Call before terminating it (a check under way finishes
  // first), and check_now() once it is terminated: its room may let another program in.
  // Returns false when it was no longer scheduled (abandoned: already terminated).
  bool remove(uint64_t program);
  // Its tool calls: a role's NAME.tool_call / NAME.tool_result, or an HTTP program's client
  // between two requests (tool_started at a request's end, tool_ended when the next comes).
  void tool_started(uint64_t program);
  void tool_ended(uint64_t program);

  // Ends the programs whose start is not over — waiting to be admitted, or to write their
  // initial texts (Ctrl-C, or another program failed to start): each is terminated in the
  // memory actor, its requests cancelled, so its start fails; and no program is added after.
  void abandon_waiting();

  void check_now();  // a check soon (once the news already sent is taken in)
  void check();      // a check now; returns when it is carried out

  // An id for a new program on the node, unique among those of every client of this scheduler.
  uint64_t new_program_id();

  ProgramManagerStats stats() const;
  std::vector<ScheduledProgram> programs() const;  // in id order
  const SchedulerOptions& options() const;

  struct Shared;  // internal: what the actor publishes, read by the handle

 private:
  std::shared_ptr<Shared> shared_;
  caf::actor actor_;
};

}  // namespace chorus
