// Patches of a running program's structure (topology.h patch()): read by the file's reader over
// the program, checked as a file is, refused with the patch's line and column or the program's
// key path. No model, no actors (tests/actors/test_program_patch.cpp runs them).
#include <gtest/gtest.h>

#include <dirent.h>
#include <nlohmann/json.hpp>
#include <string>

#include "topology/builder.h"
#include "topology/topology.h"

namespace chorus::topology {
namespace {

const char* kProgram = R"(name: p
params:
  topic: "tides {{moon}}"
blocks:
  task:
    text: "Explain {{topic}}."
  plan:
  summary:
tools:
  edit_program:
    description: "adds workers"
actors:
  planner:
    kind: thinker
    view: [task, plan]
    writes: plan
    tools: [edit_program]
    emit:
      - {at: "\n", event: step}
    sampling: {temperature: 0.7, top_k: 12, repeat_penalty: 1.3, seed: 9}
  watch:
    kind: probe
    view: [task, plan]
    question: " Done? Answer:"
    candidates: [" Yes", " No"]
    watch: plan
    every_new_tokens: 16
    fires: finished
  writer:
    kind: writer
    on: [step]
    view: [task, plan, summary]
    writes: summary
    schema: {type: object, properties: {line: {type: string, maxLength: 40}}, required: [line]}
    to: [out]
  out:
    kind: sink
    to: stdout
)";

Topology program() {
  LoadOptions lo;
  lo.require_params = false;
  auto t = load_string(kProgram, "p.yaml", lo);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? *t : Topology{};
}

std::string error_of(const Topology& t, const std::string& patch_text, const PatchOptions& o = {}) {
  auto p = patch(t, patch_text, "patch", o);
  EXPECT_FALSE(p.ok()) << "applied, but should not have: " << (p.ok() ? p->summary() : "");
  return p.ok() ? "" : p.error().message;
}

// Every setting a role's run depends on.
void expect_same(const Actor& a, const Actor& b) {
  SCOPED_TRACE(a.name);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.view, b.view);
  EXPECT_EQ(a.writes, b.writes);
  EXPECT_EQ(a.prefill, b.prefill);
  EXPECT_EQ(a.max_tokens, b.max_tokens);
  EXPECT_EQ(a.stop, b.stop);
  EXPECT_EQ(a.sampling.temperature, b.sampling.temperature);
  EXPECT_EQ(a.sampling.top_k, b.sampling.top_k);
  EXPECT_EQ(a.sampling.top_p, b.sampling.top_p);
  EXPECT_EQ(a.sampling.min_p, b.sampling.min_p);
  EXPECT_EQ(a.sampling.repeat_penalty, b.sampling.repeat_penalty);
  EXPECT_EQ(a.sampling.repeat_last_n, b.sampling.repeat_last_n);
  EXPECT_EQ(a.sampling.seed, b.sampling.seed);
  EXPECT_EQ(a.sampling.constraint.kind, b.sampling.constraint.kind);
  EXPECT_EQ(a.sampling.constraint.schema, b.sampling.constraint.schema);
  EXPECT_EQ(a.schema, b.schema);
  EXPECT_EQ(a.grammar, b.grammar);
  ASSERT_EQ(a.emits.size(), b.emits.size());
  for (size_t i = 0; i < a.emits.size(); ++i) {
    EXPECT_EQ(a.emits[i].at, b.emits[i].at);
    EXPECT_EQ(a.emits[i].event, b.emits[i].event);
  }
  EXPECT_EQ(a.to, b.to);
  EXPECT_EQ(a.tools, b.tools);
  EXPECT_EQ(a.max_tool_calls, b.max_tool_calls);
  EXPECT_EQ(a.fresh, b.fresh);
  EXPECT_EQ(a.on, b.on);
  EXPECT_EQ(a.after, b.after);
  EXPECT_EQ(a.question, b.question);
  EXPECT_EQ(a.candidates, b.candidates);
  EXPECT_EQ(a.fire_on, b.fire_on);
  EXPECT_EQ(a.threshold, b.threshold);
  EXPECT_EQ(a.fires, b.fires);
  EXPECT_EQ(a.edge, b.edge);
  EXPECT_EQ(a.watch, b.watch);
  EXPECT_EQ(a.every_new_tokens, b.every_new_tokens);
  EXPECT_EQ(a.every_ms, b.every_ms);
}

// An empty merge changes nothing: a role's settings, written back as keys and read again, are
// the same role — for every thinker, writer and probe of every shipped topology.
TEST(Patch, EmptyMergeKeepsEveryRoleOfEveryShippedTopology) {
  const std::string dir = CHORUS_TOPOLOGIES_DIR;
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  int roles = 0;
  for (dirent* e; (e = readdir(d));) {
    const std::string name = e->d_name;
    if (!name.ends_with(".yaml")) continue;
    LoadOptions lo;
    lo.require_params = false;
    auto t = load_file(dir + "/" + name, lo);
    ASSERT_TRUE(t.ok()) << t.error().message;
    for (const Actor& a : t->actors) {
      if (a.kind == Kind::source || a.kind == Kind::sink) continue;
      auto p = patch(*t, "actors: {" + a.name + ": {}}", "patch");
      ASSERT_TRUE(p.ok()) << name << ": " << p.error().message;
      EXPECT_EQ(p->changed, std::vector<std::string>{a.name});
      expect_same(*p->topology.actor(a.name), a);
      ++roles;
    }
  }
  closedir(d);
  EXPECT_GE(roles, 10);
  const Topology t = program();
  for (const char* name : {"planner", "watch", "writer"}) {
    auto p = patch(t, std::string("actors: {") + name + ": {}}", "patch");
    ASSERT_TRUE(p.ok()) << p.error().message;
    expect_same(*p->topology.actor(name), *t.actor(name));
  }
}

TEST(Patch, AddsABlockAndAWorkerThatWritesIt) {
  const Topology t = program();
  auto p = patch(t, R"({"blocks": {"work_1": null},
 "actors": {"worker_1": {"kind": "thinker", "view": ["task", "plan", "work_1"], "writes": "work_1",
   "prefill": "On {{topic}}:", "max_tokens": 40}},
 "finish": ["worker_1.done"]})",
                 "patch");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->blocks, std::vector<std::string>{"work_1"});
  EXPECT_EQ(p->added, std::vector<std::string>{"worker_1"});
  EXPECT_TRUE(p->changed.empty());
  EXPECT_EQ(p->summary(), "added block work_1; added worker_1; finish: worker_1.done");
  const Actor* w = p->topology.actor("worker_1");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->prefill, "On tides {{moon}}:");  // the program's params, in what the patch wrote
  EXPECT_EQ(w->max_tokens, 40);
  EXPECT_EQ(p->topology.block("work_1")->view, std::vector<std::string>{"work_1"});  // empty, as in a file
  EXPECT_EQ(p->topology.finish, std::vector<std::string>{"worker_1.done"});
  EXPECT_EQ(p->topology.emitters().at("worker_1.done"), std::vector<std::string>{"worker_1"});
  // What the program had is not substituted again (it holds "{{moon}}", no parameter).
  EXPECT_EQ(p->topology.block("task")->text, "Explain tides {{moon}}.");
  auto again = patch(p->topology, "actors: {worker_1: {max_tokens: 41}}", "patch");
  EXPECT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(t.actors.size(), 4u);  // the program it was given is unchanged
}

TEST(Patch, MergesKeysIntoARoleAndNullsRestoreDefaults) {
  const Topology t = program();
  auto p = patch(t, R"(actors:
  writer:
    max_tokens: 20
    view: [task, summary]
    stop: null
    sampling: {temperature: 0.2}
  planner:
    sampling: {seed: null}
)",
                 "patch");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->changed, (std::vector<std::string>{"writer", "planner"}));
  const Actor& w = *p->topology.actor("writer");
  EXPECT_EQ(w.max_tokens, 20);
  EXPECT_EQ(w.view, (std::vector<std::string>{"task", "summary"}));
  EXPECT_EQ(w.stop, std::vector<std::string>{"\n"});  // a writer's default again
  EXPECT_FLOAT_EQ(w.sampling.temperature, 0.2f);      // merged into the sampling it had
  EXPECT_EQ(w.sampling.top_k, t.actor("writer")->sampling.top_k);
  EXPECT_EQ(w.schema, t.actor("writer")->schema);  // kept
  EXPECT_EQ(w.on, std::vector<std::string>{"step"});
  const Actor& pl = *p->topology.actor("planner");
  EXPECT_EQ(pl.sampling.seed, 0u);
  EXPECT_EQ(pl.sampling.top_k, 12);
  EXPECT_EQ(pl.tools, std::vector<std::string>{"edit_program"});
  EXPECT_EQ(pl.stop, std::vector<std::string>{"</tool_call>"});  // tools still end a run at a call
}

TEST(Patch, KindReplacesARoleWhole) {
  const Topology t = program();
  auto p = patch(t, R"(actors:
  watch:
    kind: probe
    view: [plan]
    question: " Stuck? Answer:"
    candidates: [" Yes", " No"]
    every_ms: 500
)",
                 "patch");
  ASSERT_TRUE(p.ok()) << p.error().message;
  const Actor& w = *p->topology.actor("watch");
  EXPECT_EQ(w.view, std::vector<std::string>{"plan"});
  EXPECT_TRUE(w.watch.empty());  // not merged: the old `watch: plan` is gone
  EXPECT_EQ(w.every_ms, 500);
  EXPECT_EQ(w.fires, "watch.fired");  // so `finished` has no emitter, and nobody listened to it
}

TEST(Patch, RemovesARoleUnlessOthersNeedIt) {
  const Topology t = program();
  auto p = patch(t, "actors: {watch: null}", "patch");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->removed, std::vector<std::string>{"watch"});
  EXPECT_EQ(p->topology.actor("watch"), nullptr);
  // The writer runs on the planner's `step`: without the planner, the program's own key path.
  EXPECT_EQ(error_of(t, "actors: {planner: null}"),
            "patch: actors.writer.on[0]: no actor emits event \"step\" (events: finished, watch.done, "
            "writer.done)");
}

// What the patch wrote is refused at its line and column, with the file's rules and messages.
TEST(Patch, ErrorsNameThePatchLineColumnAndKeyPath) {
  const Topology t = program();
  EXPECT_EQ(error_of(t, R"(actors:
  watchdog:
    kind: probe
    view: [task, nowhere]
    question: " Yes?"
    candidates: [" Yes"]
    every_ms: 100
)"),
            "patch:4:18: actors.watchdog.view[1]: unknown block \"nowhere\" (blocks: task, plan, summary)");
  EXPECT_EQ(error_of(t, "actors:\n  writer:\n    max_tokens: lots\n"),
            "patch:3:17: actors.writer.max_tokens: expected an integer, found \"lots\"");
  EXPECT_EQ(
      error_of(t, "actors:\n  w2:\n    kind: writer\n    view: [plan]\n    writes: plan\n    on: [step]\n"),
      error_of(t, "actors:\n  w2:\n    kind: writer\n    view: [plan]\n    writes: plan\n    on: [step]\n"));
  const std::string two_writers =
      error_of(t, "actors:\n  w2:\n    kind: writer\n    view: [plan]\n    writes: plan\n    on: [step]\n");
  // The clash is found at the planner, who had the block first: the program's part, no line.
  EXPECT_TRUE(
      two_writers.starts_with("patch: actors.planner.writes: block \"plan\" is written by planner, w2"))
      << two_writers;
  EXPECT_EQ(error_of(t, "engine: {pages: 9}"),
            "patch:1:1: (top level).engine: unknown key (valid here: blocks, actors, finish)");
  EXPECT_EQ(error_of(t, "[1, 2]"),
            "patch:1:1: (top level): a patch is a mapping of blocks:, actors: and finish:, found a list");
  EXPECT_EQ(
      error_of(t, "blocks: {plan: {text: again}}"),
      "patch:1:10: blocks.plan: already in the program: a patch adds blocks (a block's text is its history)");
  EXPECT_EQ(error_of(t, "actors: {ghost: null}"), "patch:1:10: actors.ghost: no such actor to remove");
  EXPECT_EQ(
      error_of(t, "actors: {out: {prefix: '> '}}"),
      "patch:1:10: actors.out: a sink is wired at start: a patch can add sinks, not change or remove them");
  EXPECT_EQ(error_of(t, "actors: {feed: {kind: source, writes: plan, from: stdin}}"),
            "patch:1:23: actors.feed.kind: sources are wired at start: a patch cannot add one");
  EXPECT_EQ(error_of(t, "actors: {planner: {max_tokens: 9}}", {.caller = "planner"}),
            "patch:1:10: actors.planner: a role cannot change or remove itself (it called edit_program)");
  EXPECT_EQ(error_of(t, "actors: {x: {kind: thinker, view: [plan], writes: plan, prefill: '{{nope}}'}}"),
            "patch:1:66: actors.x.prefill: unknown parameter \"nope\" (params: topic)");
  EXPECT_EQ(error_of(t, "actors: {a: [unclosed"), error_of(t, "actors: {a: [unclosed"));
  EXPECT_TRUE(error_of(t, "actors: {a: [unclosed").starts_with("patch:1:"))
      << error_of(t, "actors: {a: [unclosed");
  EXPECT_EQ(error_of(t, "actors: {\xff: 1}"), "patch:1:10: not UTF-8 text");
  EXPECT_EQ(error_of(t, std::string(kMaxPatchBytes + 1, ' ')).substr(0, 20), "patch: 65537 bytes: ");
}

TEST(Patch, LimitsTheProgramsSize) {
  const Topology t = program();
  std::string many = "actors:\n";
  for (int i = 0; i < 3; ++i)
    many += "  p" + std::to_string(i) +
            ": {kind: probe, view: [plan], question: ' ok?', candidates: [' Yes'], every_ms: 50}\n";
  auto p = patch(t, many, "patch", {.max_actors = 7});
  ASSERT_TRUE(p.ok()) << p.error().message;  // 4 + 3 = 7
  auto more = patch(
      t, many + "  p9: {kind: probe, view: [plan], question: ' ok?', candidates: [' Yes'], every_ms: 50}\n",
      "patch", {.max_actors = 7});
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.error().code, Errc::out_of_range);
  EXPECT_EQ(more.error().message,
            "patch:2:3: actors: the program would have 8 actors: a patch may not take it past 7");
  auto blocks = patch(t, "blocks: {a: null, b: null}", "patch", {.max_blocks = 4});
  ASSERT_FALSE(blocks.ok());
  EXPECT_EQ(blocks.error().message,
            "patch:1:9: blocks: the program would have 5 blocks: a patch may not take it past 4");
}

// edit_program is built in: listed in a role's tools without a declaration, declared with only
// a description and parameters, never with a command.
TEST(Patch, EditProgramIsABuiltInTool) {
  const char* base =
      "blocks: {a: null}\nactors:\n  t: {kind: thinker, view: [a], writes: a, tools: [edit_program]}\n";
  auto t = load_string(base, "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_NE(t->tool("edit_program"), nullptr);
  EXPECT_TRUE(t->tool("edit_program")->builtin());
  EXPECT_TRUE(t->tool("edit_program")->command.empty());
  auto declared = load_string(std::string(base) +
                                  "tools:\n  edit_program:\n    parameters: {type: object, properties: "
                                  "{finish: {type: array, items: {type: string}}}}\n",
                              "t.yaml");
  ASSERT_TRUE(declared.ok()) << declared.error().message;
  EXPECT_FALSE(declared->actor("t")->sampling.constraint.schema.empty());  // its calls are constrained
  auto with_command =
      load_string(std::string(base) + "tools:\n  edit_program:\n    command: rm -rf /\n", "t.yaml");
  ASSERT_FALSE(with_command.ok());
  EXPECT_EQ(with_command.error().message,
            "t.yaml:6:5: tools.edit_program.command: unknown key (valid here: description, parameters)");
  Builder b("b");
  b.block("a");
  b.thinker("t", {"a"}, "a").tools = {"edit_program"};
  EXPECT_TRUE(b.build().ok()) << b.build().error().message;
}

}  // namespace
}  // namespace chorus::topology
