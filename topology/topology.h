// Topologies: an asynchronous agent described in a YAML file (format: topologies/README.md).
// This half reads and validates a file into a Topology — every name resolved, every error with
// file:line:column and the key path — without loading a model or starting an actor, so
// `chorus check` and the fuzzer use it alone. actors/program.h runs a Topology.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/forward/sampler.h"

namespace chorus::topology {

struct Block {
  std::string name;
  std::string text;                  // initial text, parameters substituted ("" = starts empty)
  std::string chat;                  // "", or the chat role the text is wrapped as a turn of
  std::vector<std::string> view;     // blocks the initial text is read under (ends with this block)
  std::vector<std::string> writers;  // roles declared to share writing this block
};

enum class Kind { thinker, writer, probe, source, sink };
const char* kind_name(Kind k);

// The built-in tool a role lists in `tools:` to change its own program: its arguments are a patch
// (patch() below), its result says what was applied or why nothing was. Declared under `tools:`
// it takes no command: only a `description:` and `parameters:` that narrow what a role may write.
inline constexpr const char* kEditProgram = "edit_program";

// A tool: a command run in the program's sandbox (actors/sandbox.h), with the call's arguments
// (JSON) on its stdin; what it prints is the result.
// Where an actor or a tool runs in a cluster (docs/cluster.md, "Placing actors"): `node: NAME`,
// that node; `node: {label: KEY=VALUE}`, any node labelled so. Empty: with its program (where
// its blocks are; today, for a cluster, the coordinator). `chorus run` on one engine runs
// everything in its process whatever the placement says (and says so).
struct Placement {
  std::string node;   // a node's name
  std::string label;  // "KEY=VALUE"
  bool empty() const { return node.empty() && label.empty(); }
  std::string describe() const;  // "node `edge-1`", "a node labelled role=edge"
  bool operator==(const Placement&) const = default;
};

struct Tool {
  std::string name;                  // kEditProgram: the built-in tool that patches the program (no command)
  std::vector<std::string> command;  // argv; a string in the file runs as sh -c STRING
  std::vector<std::string> setup;    // the same; run in the sandbox each time it is made (empty: none)
  std::string description;
  std::string parameters;  // JSON Schema of its arguments, as JSON text ("": any JSON object)
  double timeout_s = 30;
  size_t max_output_bytes = 16 << 10;
  int64_t max_dir_bytes = int64_t{256} << 20;  // its sandbox directory in all (and its /tmp)
  // What it may reach beyond its sandbox's defaults (docs/scheduling.md "Tool sandboxes"):
  std::map<std::string, std::string> env;  // variables added to its empty environment
  bool network = false;                    // the host's network (else none at all)
  std::vector<std::string> read, write;    // host paths bound read-only / read-write, at their place
  Placement node;                          // where its sandbox runs (tools placed alike share one sandbox)
  bool opts_in() const { return !env.empty() || network || !read.empty() || !write.empty(); }
  bool builtin() const;        // edit_program: run by the program itself, not in the sandbox
  std::string access() const;  // "network, reads /data, writes /out, env KEY" ("" : none)
};

struct Emit {
  std::string at;     // when the generated text passes this string...
  std::string event;  // ...this event fires, carrying the text since the last one
};

enum class SourceKind { stdin_lines, file, zmq, text, api };
enum class SinkKind { stdout_stream, stderr_stream, file, zmq, callback };

struct Actor {
  std::string name;
  Kind kind = Kind::thinker;
  int line = 0;    // where it is declared (1-based), for run-time messages
  Placement node;  // where it runs in a cluster (Placement)

  // thinker, writer, probe, source
  std::vector<std::string> view;
  std::string writes;  // thinker, writer, source

  // thinker, writer: one generation per start
  std::string prefill;  // text run before each generation
  int max_tokens = 0;
  std::vector<std::string> stop;
  SamplingParams sampling;
  std::vector<Emit> emits;
  std::vector<std::string> to;  // sinks: a thinker streams its text, a writer sends each piece
  std::vector<std::string>
      tools;               // tools it may call: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
  int max_tool_calls = 4;  // per run
  // Each run starts from an empty `writes` block: the role does not see its earlier runs (a
  // summarizer that would otherwise copy its last line). Its sinks still get every piece.
  bool fresh = false;
  // `schema:`, as JSON text ("": none): the role writes only instances of it (in
  // sampling.constraint). A role with tools of which one declares `parameters:` has instead the
  // tool-call constraint: free text without '<', then at most one valid call.
  std::string schema;
  // `grammar:`, GBNF text ("": none): the role writes only sentences of it (in sampling.constraint).
  std::string grammar;

  // Triggers: start on each of `on` (thinker, writer, probe; the text of a source of kind text),
  // or once when every one of `after` has fired. A thinker with neither starts at once.
  std::vector<std::string> on;
  std::vector<std::string> after;

  // probe
  std::string question;
  std::vector<std::string> candidates;
  std::vector<int> fire_on;  // indices into candidates: their probabilities are summed
  float threshold = 0.5f;
  std::string fires;  // the event it emits
  bool edge = true;   // fire when the probability crosses the threshold, not on every answer above
  std::string watch;  // block whose growth triggers it
  int64_t every_new_tokens = 0;
  int every_ms = 0;

  // source
  SourceKind from = SourceKind::api;
  std::string path;      // file
  bool follow = true;    // file: keep reading what is appended (tail -f)
  std::string endpoint;  // zmq (SUB for a source, PUB for a sink)
  std::string topic;     // zmq
  std::string text;      // source of kind text
  int delay_ms = 0;      // source of kind text: wait this long after its trigger
  int every_lines = 0;   // emit `emit_event` every this many lines (0: never)
  std::string emit_event;
  int64_t max_lines = 0;   // end after this many lines (0: at the end of input)
  int64_t keep_lines = 0;  // > 0: the block keeps a window of about this many recent lines

  // sink
  SinkKind sink = SinkKind::stdout_stream;
  std::string prefix;  // written before each text
  // (`on` for a sink: events whose text it writes too; `endpoint`/`path` as above)
};

struct Engine {
  int threads = 0;         // 0: one per core
  int64_t pages = 1024;    // KV pages of 16 positions
  int token_budget = 256;  // tokens per step
  int64_t max_view_tokens = 8192;
  int linear_slots = 0;  // hybrid models: blocks holding a linear state at once (EngineOptions::linear_slots)
};

struct Topology {
  std::string file;  // where it was read from ("<string>" for load_string)
  std::string name;
  std::string description;
  std::string model;  // a GGUF path ("" = the default model)
  Engine engine;
  std::map<std::string, std::string> params;
  std::vector<Block> blocks;
  std::vector<Tool> tools;
  std::vector<Actor> actors;
  std::vector<std::string> finish;  // any of these events ends the program
  double budget_seconds = 300;      // the program ends after this long (0: no limit)
  int64_t budget_tokens = 0;        // ... or after this many generated tokens in all (0: no limit)

  const Block* block(const std::string& name) const;
  const Actor* actor(const std::string& name) const;
  const Tool* tool(const std::string& name) const;
  // Who emits each event: "<actor>.done" for every role but sinks, each thinker/writer `emit`,
  // "<actor>.tool_call" and "<actor>.tool_result" for one with tools, each probe's `fires`, each
  // source's `emit`.
  std::map<std::string, std::vector<std::string>> emitters() const;
};

struct LoadOptions {
  // --set key=value: a declared parameter, or a dotted key path (budget.tokens,
  // actors.thinker.max_tokens) whose value replaces the file's.
  std::vector<std::pair<std::string, std::string>> set;
  // A parameter without a value is an error when true (run); `chorus check` passes false.
  bool require_params = true;
};

// Where a key path (e.g. "actors.writer.on[0]") is, as an error message starts with it:
// "t.yaml:22:10: actors.writer.on[0]" for a file. The checks' messages are WHERE + ": " + what.
using Locate = std::function<std::string(const std::string& path)>;
// The checks every topology passes whatever it was written in: names resolve and are unique,
// each role has what its kind needs (a view, the block it writes in that view, a trigger where
// one is needed, a probe's question and candidates...), events have emitters, `to` names sinks,
// shared writers are declared, `x.done` is x's own. load_file()/load_string() run them on what
// they read; topology/builder.h on what C++ built. Errors: Errc::bad_format, Errc::not_found.
Status check(const Topology& t, const Locate& where);

constexpr size_t kMaxFileBytes = 1 << 20;  // a topology is a page of YAML, not a data file

// Errors (Errc::bad_format, Errc::not_found, Errc::io): "file:line:column: key.path: what".
Result<Topology> load_file(const std::string& path, const LoadOptions& opts = {});
Result<Topology> load_string(const std::string& text, const std::string& file_name,
                             const LoadOptions& opts = {});

// ---- patches: a running program's structure changed (topologies/README.md "Patches") ----------

struct PatchOptions {
  // A patch may not grow a program past this many actors (or blocks), or past what it had.
  size_t max_actors = 32;
  size_t max_blocks = 64;
  std::string caller;  // the role whose edit_program call this is: it may not change or remove itself
};

// What a patch did, once checked.
struct Patched {
  Topology topology;                 // the program after it, checked as a file is
  std::vector<std::string> blocks;   // added
  std::vector<std::string> added;    // actors added,
  std::vector<std::string> changed;  // replaced (`kind:` given) or with keys changed,
  std::vector<std::string> removed;  // removed
  bool finish_changed = false;
  std::string summary() const;  // "added block b; added actor w; changed writer; removed probe"
};

constexpr size_t kMaxPatchBytes = 64 << 10;

// `text` (YAML or JSON) as a JSON Merge Patch (RFC 7386) of the program's `blocks:`, `actors:`
// and `finish:`: a block not there yet is added (a block's text is its history: one there already
// cannot be patched); an actor whose value is null is removed; one not there yet is added; one
// there whose patch has `kind:` is replaced by it whole; otherwise the patch's keys are merged
// into its settings (a null key back to its default, a list replaced whole). Sources are wired at
// start (neither added, changed nor removed), sinks only added. The result is read and checked
// exactly as a file (every chorus check rule), errors as "LABEL:line:column: key.path: what" for
// what the patch wrote and "LABEL: key.path: what" for the program's part that it broke. The
// {{params}} of the program are substituted in what the patch writes. Errc::bad_format,
// Errc::not_found, Errc::invalid_argument, Errc::out_of_range (limits).
Result<Patched> patch(const Topology& current, const std::string& text, const std::string& label,
                      const PatchOptions& opts = {});

}  // namespace chorus::topology
