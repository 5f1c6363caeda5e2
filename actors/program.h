// A running topology: one program on the actor runtime. Program::start creates the engine and
// its batcher (or joins a SharedEngine that other programs run on too), the topology's blocks
// (registered as one program with the batcher), runs each block's initial text into it, then
// spawns the role actors and a controller that routes named events between them and ends the
// program — on a `finish` event, when every thinker, writer and source is done, or when the time
// or token budget is spent.
//
// The format is in topologies/README.md; topology/topology.h reads it.
#pragma once

#include <caf/fwd.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/step/engine.h"
#include "topology/topology.h"

namespace chorus {

struct Model;
class CpuDevice;
class CudaDevice;
class ProgramManager;
class ProgramJournal;
class ActorPlacement;
class Trace;
struct ProgramPolicyOptions;

struct ProgramEvent {
  std::string name;
  std::string text;             // what the event carries: a piece of text, a probability, lines
  double seconds = 0;           // since the program started
  std::vector<std::string> to;  // the roles (and sinks) the controller sends it to
};

// Called from actor threads: make them thread-safe.
struct ProgramHooks {
  std::function<void(const std::string& sink, const std::string& text)> sink;  // sinks with `to: callback`
  std::function<void(const ProgramEvent&)> event;                              // every event, as it fires
  // Sinks with `to: stdout` / `stderr`: their text, as it would reach the terminal (prefixes and
  // line starts done), goes here instead ("stdout" or "stderr"): a program run for a client.
  std::function<void(const std::string& stream, const std::string& text)> console;
  // Run the topology's tools even where the sandbox's isolation is missing
  // (Sandbox::missing_isolation()); otherwise a program with tools refuses to start there.
  bool unsafe_tools = false;
  // Records the program's engine (a program that owns its engine: with SharedEngine the engine's
  // options carry it) into this trace (engine/step/trace.h), and the program itself on lane
  // `trace_lane` of the trace's `roles` process (named `trace_name`; defaults: its program id, the
  // topology's name): each event with who heard it, each tool run, its sandbox made and removed
  // (docs/trace.md). Null: none.
  std::shared_ptr<Trace> trace;
  int64_t trace_lane = -1;
  std::string trace_name;
  // Records what the program does (its generations, tool results, what its outward sinks
  // delivered) and, when it holds records of an earlier run of the same program, takes that
  // work again instead of doing it twice (actors/program_journal.h): a coordinator's program
  // that starts again on another node. Null: none.
  std::shared_ptr<ProgramJournal> journal;
  // Where sinks and tool sandboxes with a `node:` key run (actors/actor_placement.h: a
  // coordinator's nodes). Null: here, whatever the placement says.
  std::shared_ptr<ActorPlacement> placement;
};

struct ProgramReport {
  std::string
      ended_by;       // "finish event X", "all roles done", "time budget", "token budget", "stopped", "error"
  std::string error;  // when ended by an error: which actor, what
  double seconds = 0;
  int64_t generated_tokens = 0;
  std::map<std::string, int64_t> events;        // event -> times it fired
  std::map<std::string, int64_t> block_tokens;  // block -> tokens in it at the end
  bool ok() const { return ended_by != "error"; }
};

// One engine and its batcher that several programs run on at once: the forward passes batch
// their work together, over one copy of the model and one KV pool (`chorus run` with several
// topology files or --copies). Each program registers with the batcher under an id of its own
// and frees its blocks when it ends; the engine stays until the last holder lets go.
// The engine a topology's `engine:` section asks for (threads apart: they are the device's).
EngineOptions engine_options(const topology::Topology& t);

class SharedEngine {
 public:
  // `model`, `device` (and `gpu`) must outlive it. Errors: Engine::create's.
  static Result<std::shared_ptr<SharedEngine>> create(caf::actor_system& sys, const Model& model,
                                                      CpuDevice& device, const EngineOptions& opts,
                                                      CudaDevice* gpu = nullptr);
  // Programs run on another node's engine: `memory` is that node's memory actor, or a node link
  // standing for it (cluster/node_link.h), `pages` its pool, `scheduler` the program scheduler
  // over it (its HTTP programs' too; null: none), `where` what describe() says. The programs'
  // roles run in this process; their frames go to `memory`. `model` (the node's, for the
  // tokenizer) and `scheduler` must outlive it. counters() is null.
  static std::shared_ptr<SharedEngine> remote(const Model& model, caf::actor memory, int64_t pages,
                                              ProgramManager* scheduler, std::string where);
  ~SharedEngine();  // stops the batcher (not a remote one's)
  SharedEngine(const SharedEngine&) = delete;
  SharedEngine& operator=(const SharedEngine&) = delete;

  const Model& model() const;
  std::string describe() const;  // where its forward passes run
  caf::actor batcher() const;
  uint64_t new_program_id();                               // 1, 2, ...
  int64_t pool_pages() const;                              // KV pages in its pool
  std::shared_ptr<const EngineCounters> counters() const;  // what its engine has done (any thread)

  // Schedules the programs that start on it from now on with the program-aware policy
  // (actors/program_manager.h; the policy's capacity is the pool): each waits to be admitted,
  // and under memory pressure whole programs are paused and restored. Call before starting them.
  // `tool_lease_s`: how long a paused program keeps its tools' sandbox while nothing needs it.
  ProgramManager& schedule(const ProgramPolicyOptions& opts, double tool_lease_s = 60);
  ProgramManager* manager() const;  // null when not scheduled

 private:
  struct Impl;
  explicit SharedEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Patches a program takes in a minute, refused ones included (a role in a loop of edits stops).
inline constexpr size_t kPatchesPerMinute = 20;

class Program {
 public:
  // `model` and `device` (and `gpu`, when given: the engine's forward passes run there) must
  // outlive the program. Errors: its tools need isolation this machine lacks
  // (Sandbox::missing_isolation(), unless hooks.unsafe_tools), a block's initial text is refused
  // (past the context, or invalid), a file sink or ZeroMQ endpoint cannot be opened — each naming
  // the block or actor.
  static Result<std::unique_ptr<Program>> start(caf::actor_system& sys, const topology::Topology& t,
                                                const Model& model, CpuDevice& device,
                                                ProgramHooks hooks = {}, CudaDevice* gpu = nullptr);
  // The same on an engine other programs share: the topology's `engine:` section is not used
  // (the engine was made before). When the program ends its blocks are freed; the engine goes on.
  // On a scheduled engine (SharedEngine::schedule) it returns once the program is admitted and its
  // blocks' initial texts are written — it may wait for room — or with an error when it is
  // abandoned meanwhile (ProgramManager::abandon_waiting). Call wait() as soon as it may end:
  // that is when its blocks are freed for the programs waiting.
  static Result<std::unique_ptr<Program>> start(caf::actor_system& sys, const topology::Topology& t,
                                                std::shared_ptr<SharedEngine> engine,
                                                ProgramHooks hooks = {});
  ~Program();  // stops the program if it still runs

  // Text for a source with `from: api` (the embedded case); close() ends its input.
  Status feed(const std::string& source, const std::string& text);
  Status close(const std::string& source);

  // Changes the running program's structure (topologies/README.md "Patches"): `text` is a patch
  // (topology::patch) of its blocks, actors and finish events, checked as a file is; new blocks
  // get their initial texts, roles changed or removed end the run they are in (what they had
  // queued goes to their new selves), new roles start. Returns what changed (Patched::summary);
  // errors: the patch's (nothing changed), a block or sink it adds cannot be made (nothing
  // changed), more than kPatchesPerMinute patches in the last minute (Errc::out_of_range), the
  // program has ended. Roles listing `edit_program` in their tools call it the same way. Fires
  // `program.patched` (text: the summary) or `program.patch_refused` (the error).
  Result<std::string> patch(const std::string& text);
  topology::Topology topology() const;  // as it runs now: the last patch's result

  ProgramReport wait();  // until the program ends; then every actor of it is gone
  void stop();           // ends it now (ended_by "stopped" unless it had ended already)

 private:
  struct Impl;
  class Starter;
  struct Sinks;  // actors/program_sinks.cpp
  explicit Program(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
