// The roles of a program run from a topology (actors/program.h): the controller that routes
// named events and ends the program, thinker/writer (a generator), probe, source, sink, and the
// program's tool actor. Internal to actors/: program.cpp wires them from a Topology.
#pragma once

#include <atomic>
#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "actors/program.h"
#include "actors/program_journal.h"
#include "engine/step/engine.h"
#include "topology/topology.h"

namespace chorus::program_roles {

// (rewire_atom, Rewiring) -> bool (false: the program has ended): the controller routes by it.
using rewire_atom = caf::atom_constant<caf::atom("rewire")>;

using Clock = std::chrono::steady_clock;

// What the controller and Program::wait() share: the report, and whether it is final.
struct Outcome {
  std::mutex m;
  std::condition_variable cv;
  bool ended = false;
  ProgramReport report;
  Clock::time_point t0 = Clock::now();
  double now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }
};

struct ControllerConfig {
  std::map<std::string, std::vector<caf::actor>> subscribers;  // event -> who hears it
  // Name -> the actor in that role now: a `NAME.done` from another (retired by a patch) is stale.
  std::map<std::string, caf::actor> roles;
  std::set<std::string> finish;
  std::set<std::string> pending;  // thinkers, writers and sources not done yet
  double budget_seconds = 0;
  int64_t budget_tokens = 0;
  std::shared_ptr<Outcome> outcome;
  std::function<void(const ProgramEvent&)> hook;
};

// A patch, to the controller: the routes and roles after it. The new roles (added, or changed:
// new actors in old names) hear the `.done` of the actors already done that they listen to, as
// if they had been there; the untouched roles whose events' emitters changed hear who is left.
struct Rewiring {
  std::map<std::string, std::vector<caf::actor>> subscribers;
  std::map<std::string, caf::actor> roles;
  std::set<std::string> finish;
  std::vector<std::string> fresh;          // names of the new roles
  std::vector<std::string> pending_gone;   // thinkers and writers removed or changed: their old selves
  std::vector<std::string> pending_added;  // thinkers and writers the program waits for now
  std::vector<std::pair<caf::actor, std::vector<std::string>>> upstream;
};

// Triggers shared by the roles: `on` events (each starts one run), `after` events (all of them
// start one run), and the actors whose `.done` ends the `on` events for good.
struct Triggers {
  std::set<std::string> on, after, upstream;
};

// The text of `tmpl` with each {{event}} replaced by `event` (the text of the event that started
// the run), tokenized; the tokens of `fixed` when there is no {{event}} in it.
struct RunText {
  std::string tmpl;
  std::vector<TokenId> fixed;
  const Tokenizer* tokenizer = nullptr;
  bool dynamic() const { return tmpl.find("{{event}}") != std::string::npos; }
  std::string filled(const std::string& event) const {
    std::string s = tmpl;
    for (size_t at; (at = s.find("{{event}}")) != std::string::npos;) s.replace(at, 9, event);
    return s;
  }
  std::vector<TokenId> tokens(const std::string& event) const {
    if (!dynamic()) return fixed;
    return tokenizer->encode(filled(event), {.parse_special = true});
  }
};

struct GeneratorConfig {
  std::string name;
  RunText prefill;
  bool stream = false;  // thinker: text goes to the sinks as it is generated; writer: whole pieces
  Triggers triggers;
  Request request;  // the generate each run submits
  std::vector<topology::Emit> emits;
  std::vector<caf::actor> sinks;
  caf::actor tools;    // the program's tool actor (when it may call tools)
  caf::actor patcher;  // the program's patcher (when it may call edit_program)
  int max_tool_calls = 0;
  const Tokenizer* tokenizer = nullptr;
  BlockId clear_before_run =
      -1;  // `fresh`: this block (its `writes`) is cleared before each run but the first
  // Where its requests and tool results are recorded, and taken again when the program runs again
  // (actors/program_journal.h), under `journal_name` (its name, and its incarnation when a patch
  // made it again); null: none. It also names its text to the sinks (their journal counts per
  // producer).
  std::shared_ptr<ProgramJournal> journal;
  std::string journal_name;
  // Set when its program is ending: a tool's answer then (a cancelled run) is not recorded.
  std::shared_ptr<std::atomic<bool>> ending;
};

struct ProbeRoleConfig {
  std::string name;
  Triggers triggers;
  Request request;
  // Its question; with {{event}} and no tokenizer (hosted on an actors-only node) the filled-in
  // text goes as the Probe's question_text, tokenized by the node of the program's blocks.
  RunText question;
  std::vector<int> fire_on;
  float threshold = 0.5f;
  bool edge = true;
  std::string fires;
  BlockId watch = -1;
  int64_t every_new_tokens = 0;
  int every_ms = 0;
  // Hosted on a node (actors/actor_host.cpp): each question goes to its batcher as (frame_atom,
  // frame, asked), the text it asks about with it, which its program keeps while it is out.
  bool relayed = false;
};

struct SourceRoleConfig {
  std::string name;
  Triggers triggers;  // a source of text: when to send it
  bool text_once = false;
  std::string text;
  int delay_ms = 0;
  BlockId write_to = -1;
  std::vector<BlockId> view;
  int every_lines = 0;
  std::string emit_event;
  int64_t max_lines = 0;
  int64_t keep_lines = 0;  // > 0: the block holds a window of the last lines, not the whole stream
  bool records = false;    // each message is a record (ZeroMQ, api): it ends with a newline
  const Tokenizer* tokenizer = nullptr;
};

struct SinkRoleConfig {
  std::string name;
  topology::SinkKind kind = topology::SinkKind::stdout_stream;
  std::string prefix;
  std::shared_ptr<std::FILE> file;  // a file sink's file
  caf::actor zmq;                   // a ZeroMQ PUB sink's socket actor
  caf::actor console;               // stdout/stderr sinks write through the stream's one console actor
  std::function<void(const std::string&, const std::string&)> callback;
  // A sink that reaches the outside skips what it delivered in an earlier run of the program
  // (ProgramJournal::deliver); null: none.
  std::shared_ptr<ProgramJournal> journal;
};

caf::actor spawn_controller(caf::actor_system& sys, ControllerConfig cfg);
caf::actor spawn_generator(caf::actor_system& sys, caf::actor batcher, GeneratorConfig cfg);
caf::actor spawn_probe(caf::actor_system& sys, caf::actor batcher, ProbeRoleConfig cfg);
caf::actor spawn_source(caf::actor_system& sys, caf::actor batcher, SourceRoleConfig cfg);
caf::actor spawn_sink(caf::actor_system& sys, SinkRoleConfig cfg);
// Where a program records itself in a trace: lane `lane` of the `roles` process (Trace::kRolesPid).
struct TraceLane {
  std::shared_ptr<Trace> trace;  // null: not traced
  int64_t lane = 0;
};

// The program's tools, in one sandbox under `base` named `name` (removed when the actor ends;
// each tool's `setup` run whenever it is made); answers (role_ask_atom, ToolCall) with a
// ToolResult, making the sandbox first if a SandboxCool removed it (one-way, or asked: then the
// answer is "removed", or "" when there was none); SandboxWarm makes it again and answers "" when
// ready, else why not. A detached actor: while a tool
// runs it reads no message, so its program ends it by setting `cancel` first (the run is killed
// within about 50 ms, its result says so), then sending it an exit. With a trace, each run (and
// setup) is a slice of the program's lane, the sandbox's making and removal instants.
caf::actor spawn_tools(caf::actor_system& sys, std::string base, std::string name,
                       std::vector<topology::Tool> tools, std::shared_ptr<std::atomic<bool>> cancel = nullptr,
                       TraceLane trace = {});
// Reads a whole file (not followed) into `target` line by line (RoleText), then FeedEnded; `ctl`
// hears (RoleFailed) of a file that cannot be opened.
caf::actor spawn_file_reader(caf::actor_system& sys, std::string path, caf::actor target, std::string who,
                             caf::actor ctl);

}  // namespace chorus::program_roles

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::program_roles::Rewiring)
