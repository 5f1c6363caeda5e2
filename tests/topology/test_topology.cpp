// The topology reader: every error class names file, line, column and key path; shipped
// topologies load; hostile files fail fast. No model, no actors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <dirent.h>
#include <chrono>
#include <functional>
#include <string>

#include "topology/builder.h"
#include "topology/topology.h"

namespace chorus::topology {
namespace {

// A small valid topology; tests break one thing in it.
const char* kBase = R"(name: t
params:
  input: "hello"
blocks:
  system:
    text: "You are terse."
  prompt:
    chat: user
    text: "{{input}}"
  thoughts:
  notes:
actors:
  thinker:
    kind: thinker
    view: [system, prompt, thoughts]
    writes: thoughts
    prefill: "<|im_start|>assistant\n"
    emit:
      - {at: "\n", event: paragraph}
  writer:
    kind: writer
    on: [paragraph]
    view: [system, prompt, thoughts, notes]
    writes: notes
    to: [out]
  out:
    kind: sink
    to: stdout
)";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// The error message of loading `text`, which must fail.
std::string error_of(const std::string& text, const LoadOptions& opts = {}) {
  auto t = load_string(text, "t.yaml", opts);
  EXPECT_FALSE(t.ok()) << "loaded, but should not have";
  return t.ok() ? "" : t.error().message;
}

TEST(Topology, BaseLoadsWithEverythingResolved) {
  auto t = load_string(kBase, "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->name, "t");
  ASSERT_EQ(t->blocks.size(), 4u);
  EXPECT_EQ(t->blocks[1].text, "hello");  // {{input}} substituted
  EXPECT_EQ(t->blocks[1].chat, "user");
  EXPECT_EQ(t->blocks[1].view, (std::vector<std::string>{"system", "prompt"}));  // blocks before it, then it
  ASSERT_EQ(t->actors.size(), 3u);
  EXPECT_EQ(t->actors[1].kind, Kind::writer);
  EXPECT_EQ(t->actors[1].stop, std::vector<std::string>{"\n"});  // a writer's default
  EXPECT_EQ(t->actors[0].sampling.temperature, 0.0f);            // greedy unless told
  const auto ev = t->emitters();
  EXPECT_EQ(ev.at("paragraph"), std::vector<std::string>{"thinker"});
  EXPECT_EQ(ev.at("writer.done"), std::vector<std::string>{"writer"});
  EXPECT_EQ(ev.count("out.done"), 0u);  // sinks emit nothing
}

// engine.linear_slots: read, 0 by default, and out of range named.
TEST(Topology, EngineLinearSlotsAreReadAndChecked) {
  auto t = load_string(std::string("engine:\n  linear_slots: 6\n") + kBase, "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->engine.linear_slots, 6);
  EXPECT_EQ(load_string(kBase, "t.yaml")->engine.linear_slots, 0);
  const std::string e = error_of(std::string("engine:\n  linear_slots: -1\n") + kBase);
  EXPECT_NE(e.find("engine.linear_slots"), std::string::npos) << e;
}

TEST(Topology, UnknownBlockInAViewNamesLineColumnAndTheBlocks) {
  const auto e = error_of(
      replace(kBase, "view: [system, prompt, thoughts, notes]", "view: [system, log, thoughts, notes]"));
  EXPECT_EQ(
      e,
      "t.yaml:23:20: actors.writer.view[1]: unknown block \"log\" (blocks: system, prompt, thoughts, notes)");
}

TEST(Topology, AnEventNobodyEmitsListsTheEvents) {
  const auto e = error_of(replace(kBase, "on: [paragraph]", "on: [paragraf]"));
  EXPECT_EQ(e,
            "t.yaml:22:10: actors.writer.on[0]: no actor emits event \"paragraf\" "
            "(events: paragraph, thinker.done, writer.done)");
}

TEST(Topology, UnknownRoleKindListsTheKinds) {
  const auto e = error_of(replace(kBase, "kind: writer", "kind: scribe"));
  EXPECT_EQ(e,
            "t.yaml:21:11: actors.writer.kind: unknown role kind \"scribe\" (kinds: thinker, writer, probe, "
            "source, sink)");
}

TEST(Topology, ABlockWrittenByTwoRolesNeedsThemDeclared) {
  const std::string two = replace(kBase, "writes: notes", "writes: thoughts");
  auto e =
      error_of(replace(two, "view: [system, prompt, thoughts, notes]", "view: [system, prompt, thoughts]"));
  EXPECT_EQ(e,
            "t.yaml:16:13: actors.thinker.writes: block \"thoughts\" is written by thinker, writer: declare "
            "them in "
            "blocks.thoughts.writers to let them share it (each write then goes in whole, in arrival order)");
  // Declared: fine.
  std::string ok =
      replace(two, "view: [system, prompt, thoughts, notes]", "view: [system, prompt, thoughts]");
  ok = replace(ok, "  thoughts:\n", "  thoughts:\n    writers: [thinker, writer]\n");
  auto t = load_string(ok, "t.yaml");
  EXPECT_TRUE(t.ok()) << t.error().message;
  // A declared writer that does not write it.
  const auto e2 = error_of(replace(kBase, "  notes:\n", "  notes:\n    writers: [thinker]\n"));
  EXPECT_EQ(e2, "t.yaml:12:15: blocks.notes.writers[0]: actor \"thinker\" does not write this block");
}

TEST(Topology, UnknownKeysListTheValidOnes) {
  const auto e = error_of(replace(kBase, "    prefill:", "    prefil: x\n    prefill:"));
  EXPECT_EQ(
      e,
      "t.yaml:17:5: actors.thinker.prefil: unknown key (valid here: kind, view, writes, prefill, max_tokens, "
      "stop, sampling, schema, grammar, emit, to, on, after, tools, max_tool_calls, fresh, node)");
  const auto top = error_of(std::string(kBase) + "budgett: {seconds: 1}\n");
  EXPECT_EQ(
      top,
      "t.yaml:29:1: (top level).budgett: unknown key (valid here: name, description, model, engine, params, "
      "budget, finish, blocks, tools, actors)");
}

TEST(Topology, FreshIsABooleanOfThinkersAndWriters) {
  auto t = load_string(replace(kBase, "    prefill:", "    fresh: true\n    prefill:"), "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_TRUE(t->actor("thinker")->fresh);
  EXPECT_FALSE(load_string(kBase, "t.yaml")->actor("thinker")->fresh);  // the default
  EXPECT_EQ(error_of(replace(kBase, "    prefill:", "    fresh: 3\n    prefill:")),
            "t.yaml:17:12: actors.thinker.fresh: expected true or false, found \"3\"");
}

TEST(Topology, WrongTypesAndRangesSayWhatWasExpected) {
  EXPECT_EQ(error_of(replace(kBase, "    prefill:", "    max_tokens: lots\n    prefill:")),
            "t.yaml:17:17: actors.thinker.max_tokens: expected an integer, found \"lots\"");
  EXPECT_EQ(error_of(replace(kBase, "    prefill:", "    max_tokens: 0\n    prefill:")),
            "t.yaml:17:17: actors.thinker.max_tokens: 0 is out of range [1, 1048576]");
  EXPECT_EQ(error_of(replace(kBase, "    prefill:", "    sampling: {temperature: hot}\n    prefill:")),
            "t.yaml:17:29: actors.thinker.sampling.temperature: expected a number, found \"hot\"");
  EXPECT_EQ(error_of(replace(kBase, "view: [system, prompt, thoughts]", "view: {a: 1}")),
            "t.yaml:15:11: actors.thinker.view: expected a name or a list of names, found a mapping");
  EXPECT_EQ(error_of(replace(kBase, "    kind: sink\n    to: stdout", "    kind: sink\n    to: printer")),
            "t.yaml:28:9: actors.out.to: unknown sink \"printer\" (stdout, stderr, callback, {file: PATH}, "
            "{zmq: ENDPOINT})");
}

TEST(Topology, MissingKeysSayWhatTheyAreFor) {
  EXPECT_EQ(error_of(replace(kBase, "    writes: thoughts\n", "")),
            "t.yaml:14:5: actors.thinker.writes: missing: the block it writes");
  EXPECT_EQ(error_of(replace(kBase, "    on: [paragraph]\n", "")),
            "t.yaml:21:5: actors.writer: a writer needs a trigger: `on: [event, ...]` (a piece per event) or "
            "`after: "
            "[...]` (one piece)");
  EXPECT_EQ(error_of("name: x\nactors: {}\n"),
            "t.yaml:1:1: blocks: missing: a topology needs at least one block");
}

TEST(Topology, CrossReferencesAreChecked) {
  EXPECT_EQ(error_of(replace(kBase, "to: [out]", "to: [thinker]")),
            "t.yaml:25:10: actors.writer.to[0]: \"thinker\" is a thinker, not a sink (sinks: out)");
  EXPECT_EQ(error_of(replace(kBase, "writes: thoughts", "writes: notes")),
            "t.yaml:16:13: actors.thinker.writes: block \"notes\" must be in the actor's view (it reads what "
            "it writes)");
}

TEST(Topology, ParametersAreDeclaredAndSet) {
  EXPECT_EQ(error_of(replace(kBase, "{{input}}", "{{inptu}}")),
            "t.yaml:9:11: blocks.prompt.text: unknown parameter \"inptu\" (params: input)");
  const std::string required = replace(kBase, "input: \"hello\"", "input:");
  EXPECT_EQ(error_of(required),
            "t.yaml:9:11: blocks.prompt.text: parameter \"input\" has no value: give one with --set "
            "input=... or --input");
  LoadOptions check;
  check.require_params = false;  // chorus check: a parameter without a value is fine
  EXPECT_TRUE(load_string(required, "t.yaml", check).ok());
  LoadOptions set;
  set.set = {{"input", "why?"}, {"actors.thinker.max_tokens", "7"}};
  auto t = load_string(required, "t.yaml", set);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->blocks[1].text, "why?");
  EXPECT_EQ(t->actors[0].max_tokens, 7);
  set.set = {{"actors.thinker.max_tokens", "-3"}};
  EXPECT_EQ(
      error_of(kBase, set),
      "t.yaml: --set actors.thinker.max_tokens: actors.thinker.max_tokens: -3 is out of range [1, 1048576]");
  set.set = {{"inptu", "x"}};
  EXPECT_EQ(
      error_of(kBase, set),
      "t.yaml: --set inptu: no such parameter (params: input; a key path has dots, e.g. budget.tokens)");
  set.set = {{"actors.nobody.max_tokens", "3"}};
  EXPECT_EQ(error_of(kBase, set), "--set actors.nobody.max_tokens: no actors.nobody in the file");
  EXPECT_EQ(error_of(replace(kBase, "text: \"You are terse.\"", "text: \"{{event}}\"")),
            "t.yaml:6:11: blocks.system.text: {{event}} is only for a prefill or a probe's question (the "
            "text of the "
            "event that starts the run)");
}

TEST(Topology, RoleRulesAreChecked) {
  EXPECT_EQ(
      error_of(replace(kBase, "on: [paragraph]", "on: [writer.done]")),
      "t.yaml:22:10: actors.writer.on[0]: an actor cannot be triggered by its own event \"writer.done\"");
  EXPECT_EQ(error_of(replace(kBase, "on: [paragraph]", "on: [paragraph]\n    after: [thinker.done]")),
            "t.yaml:23:12: actors.writer.after: give `on` (a run per event) or `after` (one run), not both");
  const char* probe = R"(blocks:
  log:
actors:
  p:
    kind: probe
    view: [log]
    question: "Bad?"
    candidates: [" Yes", " No"]
    fire_on: " Maybe"
    every_ms: 100
)";
  EXPECT_EQ(error_of(probe),
            "t.yaml:9:14: actors.p.fire_on: \" Maybe\" is not a candidate (candidates: \" Yes\", \" No\")");
  EXPECT_EQ(error_of(replace(replace(probe, "    every_ms: 100\n", ""), "    fire_on: \" Maybe\"\n", "")),
            "t.yaml:5:5: actors.p: a probe needs a trigger: `watch: BLOCK` (every_new_tokens), `every_ms: N` "
            "or `on: "
            "[event, ...]`");
  const char* source = R"(blocks:
  log:
actors:
  s:
    kind: source
    from: {file: /tmp/x.log}
    writes: log
    every_lines: 5
    emit: lines
    keep_lines: 6
)";
  EXPECT_EQ(error_of(source),
            "t.yaml:10:17: actors.s.keep_lines: must be at least twice every_lines (5): the last "
            "every_lines lines are kept when the window is cleared");
  EXPECT_EQ(error_of(replace(source, "{file: /tmp/x.log}", "{file: /tmp/x.log, zmq: \"tcp://a:1\"}")),
            "t.yaml:6:11: actors.s.from: give exactly one of file, zmq, text");
}

// `grammar:` on a role: GBNF text, compiled at load (an error names the grammar's line and
// column under the role's path), not with `schema:` or `tools:`.
TEST(Topology, GrammarsConstrainRoles) {
  auto t =
      load_string(replace(kBase, "    writes: thoughts\n",
                          "    writes: thoughts\n    grammar: |\n      root ::= (\"yes\" | \"no\") \".\"\n"),
                  "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->actors[0].sampling.constraint.kind, OutputConstraint::Kind::gbnf);
  EXPECT_EQ(t->actors[0].grammar, "root ::= (\"yes\" | \"no\") \".\"\n");
  const std::string bad = error_of(
      replace(kBase, "    writes: thoughts\n", "    writes: thoughts\n    grammar: 'root ::= [a'\n"));
  EXPECT_NE(bad.find("actors.thinker.grammar: GBNF line 1 column 10: this class is never closed"),
            std::string::npos)
      << bad;
  EXPECT_NE(
      error_of(replace(kBase, "    writes: thoughts\n",
                       "    writes: thoughts\n    grammar: 'root ::= \"a\"'\n    schema: {type: integer}\n"))
          .find("actors.thinker.grammar: `grammar:` constrains the whole output"),
      std::string::npos);
}

// `schema:` on a role and `parameters:` on a tool: JSON Schemas written in YAML, compiled at load
// (a schema chorus cannot follow fails in the file, naming the keyword), and the role's
// generations constrained by them.
TEST(Topology, SchemasConstrainRolesAndToolCalls) {
  auto t = load_string(replace(kBase, "    writes: thoughts\n",
                               "    writes: thoughts\n    schema:\n      type: object\n      properties:\n"
                               "        n: {type: integer}\n        s: {type: string, maxLength: 3}\n"
                               "        q: {const: \"7\"}\n      required: [n]\n"),
                       "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const Actor& a = t->actors[0];
  EXPECT_EQ(a.sampling.constraint.kind, OutputConstraint::Kind::json_schema);
  EXPECT_EQ(
      nlohmann::json::parse(a.schema),
      nlohmann::json::parse(R"({"type":"object","properties":{"n":{"type":"integer"},)"
                            R"("s":{"type":"string","maxLength":3},"q":{"const":"7"}},"required":["n"]})"));
  EXPECT_EQ(error_of(replace(kBase, "    writes: thoughts\n",
                             "    writes: thoughts\n    schema: {type: string, multipleOf: 2}\n")),
            "t.yaml:17:13: actors.thinker.schema: JSON schema at '#': keyword 'multipleOf' is not supported "
            "(docs/structured-output.md lists what is)");
  EXPECT_EQ(error_of(replace(kBase, "    writes: thoughts\n", "    writes: thoughts\n    schema: [1]\n")),
            "t.yaml:17:13: actors.thinker.schema: expected a JSON Schema (a mapping), found a list");
  // Found by topology_fuzz: yaml-cpp reads the escape \_ (U+00A0) as the one byte 0xA0, not UTF-8; a
  // schema holding it threw out of the loader.
  EXPECT_NE(error_of(replace(kBase, "    writes: thoughts\n",
                             "    writes: thoughts\n    schema: {type: string, const: \"a\\_b\"}\n"))
                .find("actors.thinker.schema: a JSON Schema is UTF-8 text"),
            std::string::npos);

  const std::string with_tools =
      replace(kBase, "actors:\n",
              "tools:\n  add:\n    command: [python3, add.py]\n    parameters:\n      type: object\n"
              "      properties: {a: {type: integer}, b: {type: integer}}\n      required: [a, b]\n"
              "  clock: {command: date}\nactors:\n");
  auto u = load_string(
      replace(with_tools, "    writes: thoughts\n", "    writes: thoughts\n    tools: [add, clock]\n"),
      "t.yaml");
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->actors[0].sampling.constraint.kind, OutputConstraint::Kind::tool_calls);
  EXPECT_EQ(nlohmann::json::parse(u->actors[0].sampling.constraint.schema),
            nlohmann::json::parse(
                R"([{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"},)"
                R"("b":{"type":"integer"}},"required":["a","b"]}},{"name":"clock","parameters":null}])"));
  // Tools without parameters leave a role unconstrained, as before.
  auto v = load_string(
      replace(with_tools, "    writes: thoughts\n", "    writes: thoughts\n    tools: [clock]\n"), "t.yaml");
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_TRUE(v->actors[0].sampling.constraint.empty());
  EXPECT_NE(error_of(replace(with_tools, "    writes: thoughts\n",
                             "    writes: thoughts\n    tools: [add]\n    schema: {type: integer}\n"))
                .find("actors.thinker.schema: a role with tools writes text and tool calls"),
            std::string::npos);
  EXPECT_NE(error_of(replace(with_tools, "required: [a, b]", "required: [a, c]"))
                .find("tools.add.parameters: JSON schema at '#/required': required property 'c' is not in "
                      "'properties'"),
            std::string::npos);
}

TEST(Topology, ToolsAreDeclaredAndNamed) {
  const std::string with_tools =
      replace(kBase, "actors:\n",
              "tools:\n  add:\n    command: [python3, add.py]\n  clock: {command: date}\nactors:\n");
  auto t = load_string(
      replace(with_tools, "    writes: thoughts\n", "    writes: thoughts\n    tools: [add, clock]\n"),
      "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->tools.size(), 2u);
  EXPECT_EQ(t->tools[0].command, (std::vector<std::string>{"python3", "add.py"}));
  EXPECT_EQ(t->tools[1].command, (std::vector<std::string>{"sh", "-c", "date"}));
  EXPECT_EQ(t->actors[0].stop, std::vector<std::string>{"</tool_call>"});  // a call ends a run
  EXPECT_EQ(t->emitters().count("thinker.tool_result"), 1u);
  EXPECT_EQ(
      error_of(replace(with_tools, "    writes: thoughts\n", "    writes: thoughts\n    tools: [ad]\n")),
      "t.yaml:21:13: actors.thinker.tools[0]: unknown tool \"ad\" (tools: add, clock)");
  EXPECT_EQ(error_of(replace(with_tools, "command: date", "command: \"\"")),
            "t.yaml:15:20: tools.clock.command: must not be empty");
  // `setup`: run in the sandbox each time it is made; the same forms as `command`.
  auto s = load_string(replace(replace(with_tools, "command: date", "command: date, setup: \"touch ready\""),
                               "    writes: thoughts\n", "    writes: thoughts\n    tools: [add, clock]\n"),
                       "t.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s->tools[0].setup.empty());
  EXPECT_EQ(s->tools[1].setup, (std::vector<std::string>{"sh", "-c", "touch ready"}));
  EXPECT_EQ(error_of(replace(with_tools, "command: date", "command: date, setup: []")),
            "t.yaml:15:33: tools.clock.setup: needs a program to run");
}

TEST(Topology, SyntaxErrorsHaveLineAndColumn) {
  EXPECT_EQ(error_of("blocks:\n  a: [x, y\nactors: {}\n"), "t.yaml:3:7: end of sequence flow not found");
  EXPECT_EQ(error_of(""), "t.yaml: empty: a topology needs blocks and actors");
  EXPECT_EQ(error_of("- a\n- b\n"),
            "t.yaml:1:1: (top level): expected a mapping (name:, blocks:, actors:, ...), found a list");
}

TEST(Topology, HostileFilesFailCleanlyAndFast) {
  const auto t0 = std::chrono::steady_clock::now();
  // Deep nesting: flow and block style.
  EXPECT_NE(error_of("blocks: " + std::string(100000, '[') + std::string(100000, ']') + "\n")
                .find("t.yaml:1:200009: nested too deeply (yaml-cpp stops at 500 levels)"),
            std::string::npos);
  std::string dashes = "blocks:\n";
  for (int i = 0; i < 50000; ++i) dashes += "- ";
  EXPECT_NE(error_of(dashes + "x\n").find("nested too deeply"), std::string::npos);
  // A billion laughs: aliases are shared, never expanded; the reader looks only where it expects.
  // (4^25 leaves if expanded), used where a list of names is expected.
  std::string bomb = "blocks:\n  x:\n    writers:\n      - &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'z'; ++c)
    bomb += std::string("      - &") + c + " [*" + static_cast<char>(c - 1) + ", *" +
            static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) +
            "]\n";
  bomb += "actors:\n  s:\n    kind: sink\n    to: stdout\n    on: *z\n";
  EXPECT_EQ(error_of(bomb), "t.yaml:4:9: blocks.x.writers[0]: expected a string, found a list");
  // Too large; not UTF-8.
  EXPECT_EQ(error_of(std::string(kMaxFileBytes + 1, '#')),
            "t.yaml: 1048577 bytes: a topology may have at most 1048576 bytes");
  EXPECT_EQ(error_of("blocks:\n  a:\n    text: \"caf\xE9\"\n"),
            "t.yaml:3:15: not UTF-8 text (a topology file is UTF-8)");
  EXPECT_EQ(error_of("blocks:\n  \xC0\xAF: x\n"), "t.yaml:2:3: not UTF-8 text (a topology file is UTF-8)");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0) << "hostile inputs must fail fast";
}

TEST(Topology, MissingFileIsAnIoError) {
  auto t = load_file("/nonexistent/t.yaml");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code, Errc::io);
  EXPECT_EQ(t.error().message, "/nonexistent/t.yaml: cannot open: No such file or directory");
}

// Every topology shipped in topologies/ passes the checks `chorus check` makes.
TEST(Topology, ShippedTopologiesLoad) {
  const std::string dir = CHORUS_TOPOLOGIES_DIR;
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  int n = 0;
  for (dirent* e; (e = readdir(d)) != nullptr;) {
    const std::string f = e->d_name;
    if (f.size() < 5 || f.substr(f.size() - 5) != ".yaml") continue;
    auto t = load_file(dir + "/" + f);
    EXPECT_TRUE(t.ok()) << f << ": " << t.error().message;
    ++n;
  }
  closedir(d);
  EXPECT_GE(n, 5);
}

// A tool's opt-ins are read, shown by access(), and checked: absolute plain paths, not /proc or
// /dev, variable names.
TEST(Topology, ToolOptInsAreReadAndChecked) {
  const std::string base = R"(blocks:
  a: {text: "x"}
tools:
  fetch:
    command: "cat"
    env: {API_URL: "http://example.invalid"}
    network: true
    read: [/srv/data]
    write: /srv/out
actors:
  t: {kind: thinker, view: [a], writes: a, tools: [fetch]}
)";
  auto t = load_string(base, "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const Tool& x = t->tools.at(0);
  EXPECT_TRUE(x.network);
  EXPECT_EQ(x.read, std::vector<std::string>{"/srv/data"});
  EXPECT_EQ(x.write, std::vector<std::string>{"/srv/out"});
  EXPECT_EQ(x.env.at("API_URL"), "http://example.invalid");
  EXPECT_EQ(x.access(), "network, reads /srv/data, writes /srv/out, env API_URL");
  auto error_of = [&](const std::string& from, const std::string& to) {
    auto r = load_string(replace(base, from, to), "t.yaml");
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_EQ(error_of("read: [/srv/data]", "read: [srv/data]"),
            "t.yaml:8:12: tools.fetch.read[0]: \"srv/data\" is not an absolute path");
  EXPECT_EQ(
      error_of("read: [/srv/data]", "read: [/srv/../etc]"),
      "t.yaml:8:12: tools.fetch.read[0]: \"/srv/../etc\": give a plain absolute path (no trailing /, no . "
      "or .. parts), not the root");
  EXPECT_EQ(error_of("write: /srv/out", "write: /"),
            "t.yaml:9:12: tools.fetch.write: \"/\": give a plain absolute path (no trailing /, no . or .. "
            "parts), not the root");
  EXPECT_EQ(error_of("read: [/srv/data]", "read: [/proc/1]"),
            "t.yaml:8:12: tools.fetch.read[0]: \"/proc/1\": the sandbox makes /proc its own");
  EXPECT_EQ(
      error_of("API_URL:", "1URL:"),
      "t.yaml:6:17: tools.fetch.env.1URL: not a variable name (letters, digits and _, not starting with a "
      "digit)");
  EXPECT_EQ(error_of("network: true", "network: maybe"),
            "t.yaml:7:14: tools.fetch.network: expected true or false, found \"maybe\"");
}

// A program built in C++ is the topology its file gives: topologies/thinker_writer.yaml, built
// field by field with the Builder, compares equal where it matters to what the reader made.
TEST(Builder, BuildsWhatTheFileGives) {
  LoadOptions lo;
  lo.set = {{"input", "Why is the sky blue?"}};
  auto file = load_file(std::string(CHORUS_TOPOLOGIES_DIR) + "/thinker_writer.yaml", lo);
  ASSERT_TRUE(file.ok()) << file.error().message;
  Builder b("thinker_writer");
  b.topology().budget_seconds = 120;
  b.block("prompt", "Why is the sky blue? Explain it in three short paragraphs.").chat = "user";
  b.block("thoughts");
  b.block("notes");
  Actor& thinker = b.thinker("thinker", {"prompt", "thoughts"}, "thoughts");
  thinker.prefill = "<|im_start|>assistant\n";
  thinker.max_tokens = 256;
  thinker.emits = {{"\n", "paragraph"}};
  thinker.to = {"thoughts_out"};
  Actor& writer = b.writer("writer", {"prompt", "thoughts", "notes"}, "notes", {"paragraph"});
  writer.prefill =
      "<|im_start|>user\nSummarize your last paragraph in a few words of your own.<|im_end|>\n"
      "<|im_start|>assistant\n";
  writer.max_tokens = 32;
  writer.sampling.repeat_penalty = 1.3f;
  writer.sampling.repeat_last_n = 64;
  writer.fresh = true;
  writer.stop = {"\n", "<|im_end|>"};
  writer.to = {"notes_out"};
  b.sink("thoughts_out");
  b.sink("notes_out").prefix = "    [writer] ";
  auto built = b.build();
  ASSERT_TRUE(built.ok()) << built.error().message;
  EXPECT_EQ(built->budget_seconds, file->budget_seconds);
  ASSERT_EQ(built->blocks.size(), file->blocks.size());
  for (size_t i = 0; i < file->blocks.size(); ++i) {
    EXPECT_EQ(built->blocks[i].name, file->blocks[i].name);
    EXPECT_EQ(built->blocks[i].text, file->blocks[i].text);
    EXPECT_EQ(built->blocks[i].chat, file->blocks[i].chat);
  }
  ASSERT_EQ(built->actors.size(), file->actors.size());
  for (size_t i = 0; i < file->actors.size(); ++i) {
    const Actor &x = built->actors[i], &y = file->actors[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind) << y.name;
    EXPECT_EQ(x.view, y.view) << y.name;
    EXPECT_EQ(x.writes, y.writes) << y.name;
    EXPECT_EQ(x.prefill, y.prefill) << y.name;
    EXPECT_EQ(x.max_tokens, y.max_tokens) << y.name;
    EXPECT_EQ(x.stop, y.stop) << y.name;
    EXPECT_EQ(x.to, y.to) << y.name;
    EXPECT_EQ(x.on, y.on) << y.name;
    EXPECT_EQ(x.sink, y.sink) << y.name;
    EXPECT_EQ(x.prefix, y.prefix) << y.name;
    EXPECT_EQ(x.fresh, y.fresh) << y.name;
    EXPECT_EQ(x.sampling.repeat_penalty, y.sampling.repeat_penalty) << y.name;
    EXPECT_EQ(x.sampling.repeat_last_n, y.sampling.repeat_last_n) << y.name;
    ASSERT_EQ(x.emits.size(), y.emits.size()) << y.name;
    for (size_t k = 0; k < y.emits.size(); ++k) {
      EXPECT_EQ(x.emits[k].at, y.emits[k].at);
      EXPECT_EQ(x.emits[k].event, y.emits[k].event);
    }
  }
}

// What a file would be refused for, a built topology is refused for, with the key path.
TEST(Builder, RefusesWhatAFileWouldBeRefusedFor) {
  auto error_of = [](const std::function<void(Builder&)>& change) {
    Builder b("b");
    b.block("a", "hello");
    b.block("out_block");
    Actor& t = b.thinker("t", {"a", "out_block"}, "out_block");
    t.emits = {{"\n", "line"}};
    t.to = {"out"};
    b.sink("out");
    change(b);
    auto r = b.build();
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_EQ(error_of([](Builder&) {}), "ok");
  EXPECT_EQ(
      error_of([](Builder& b) {
        b.writer("w", {"a", "out_block"}, "out_block", {"line"});
      }),
      "b: actors.t.writes: block \"out_block\" is written by t, w: declare them in blocks.out_block.writers "
      "to let them share it (each write then goes in whole, in arrival order)");
  EXPECT_EQ(error_of([](Builder& b) { b.thinker("u", {"a"}, "zzz"); }),
            "b: actors.u.writes: unknown block \"zzz\" (blocks: a, out_block)");
  EXPECT_EQ(error_of([](Builder& b) { b.thinker("t", {"a"}, "a"); }),
            "b: actors.t: a second actor of this name");
  EXPECT_EQ(error_of([](Builder& b) { b.block("a"); }), "b: blocks.a: a second block of this name");
  EXPECT_EQ(error_of([](Builder& b) {
              b.thinker("u", {"a", "nope"}, "a");
            }),
            "b: actors.u.view[1]: unknown block \"nope\" (blocks: a, out_block)");
  EXPECT_EQ(error_of([](Builder& b) { b.thinker("u", {"a"}, "out_block"); }),
            "b: actors.u.writes: block \"out_block\" must be in the actor's view (it reads what it writes)");
  EXPECT_EQ(error_of([](Builder& b) { b.writer("u", {"a"}, "a", {"nobody.said"}); }),
            "b: actors.u.on[0]: no actor emits event \"nobody.said\" (events: line, t.done, u.done)");
  EXPECT_EQ(error_of([](Builder& b) { b.writer("u", {"a"}, "a", {"u.done"}); }),
            "b: actors.u.on[0]: an actor cannot be triggered by its own event \"u.done\"");
  EXPECT_EQ(
      error_of([](Builder& b) { b.writer("u", {"a"}, "a", {}); }),
      "b: actors.u: a writer needs a trigger: `on: [event, ...]` (a piece per event) or `after: [...]` (one "
      "piece)");
  EXPECT_EQ(error_of([](Builder& b) {
              b.probe("p", {"a"}, "Is it? Answer:", {" Yes", " No"});
            }),
            "b: actors.p: a probe needs a trigger: `watch: BLOCK` (every_new_tokens), `every_ms: N` or `on: "
            "[event, "
            "...]`");
  EXPECT_EQ(error_of([](Builder& b) { b.probe("p", {"a"}, "Is it?", {" Yes"}).fire_on = {1}; }),
            "b: actors.p.fire_on: candidate 1 does not exist");
  EXPECT_EQ(error_of([](Builder& b) { b.thinker("u", {"a"}, "a").to = {"t"}; }),
            "b: actors.u.to[0]: \"t\" is a thinker, not a sink (sinks: out)");
  EXPECT_EQ(error_of([](Builder& b) { b.thinker("u", {"a"}, "a").tools = {"calc"}; }),
            "b: actors.u.tools: unknown tool \"calc\"");
  EXPECT_EQ(error_of([](Builder& b) { b.source("s", SourceKind::zmq, "a"); }),
            "b: actors.s.endpoint: expected an endpoint such as tcp://127.0.0.1:5556");
  EXPECT_EQ(error_of([](Builder& b) { b.topology().finish = {"never"}; }),
            "b: finish[0]: no actor emits event \"never\" (events: line, t.done)");
}

// Declared writers share a block; a built program with tools stops at the end of a call, as one
// read from a file does.
TEST(Builder, SharedWritersAndToolsAsAFileHasThem) {
  Builder b("b");
  b.block("a", "hello");
  b.block("out_block").writers = {"t", "w"};
  Actor& t = b.thinker("t", {"a", "out_block"}, "out_block");
  t.emits = {{"\n", "line"}};
  b.tool("calc", {"sh", "-c", "cat"});
  t.tools = {"calc"};
  b.writer("w", {"a", "out_block"}, "out_block", {"line"});
  auto built = b.build();
  ASSERT_TRUE(built.ok()) << built.error().message;
  EXPECT_EQ(built->actors[0].stop, std::vector<std::string>{"</tool_call>"});
  EXPECT_EQ(built->tools.size(), 1u);
}

}  // namespace
}  // namespace chorus::topology

namespace chorus::topology {
namespace {

// `node:` on actors and tools (docs/cluster.md, "Placing actors"): a node's name or a label.
TEST(TopologyPlacement, NodeNamesAndLabelsAreReadAndChecked) {
  auto t = load_string(
      replace(replace(kBase, "    to: stdout\n", "    to: stdout\n    node: {label: role=edge}\n"),
              "    kind: writer\n", "    kind: writer\n    node: gpu-1\n"),
      "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->actor("out")->node.label, "role=edge");
  EXPECT_EQ(t->actor("writer")->node.node, "gpu-1");
  EXPECT_TRUE(t->actor("thinker")->node.empty());
  EXPECT_EQ(t->actor("out")->node.describe(), "a node labelled role=edge");
  EXPECT_EQ(t->actor("writer")->node.describe(), "node `gpu-1`");
  const std::string with_tool = std::string(kBase) + R"(tools:
  a:
    command: "true"
    node: {label: role=tools}
  b:
    command: "true"
    node: {label: role=tools}
)";
  auto tools = load_string(with_tool, "t.yaml");
  ASSERT_TRUE(tools.ok()) << tools.error().message;
  EXPECT_EQ(tools->tool("a")->node.label, "role=tools");
  // Refusals, each at its line and key.
  EXPECT_NE(error_of(replace(kBase, "    to: stdout\n", "    to: stdout\n    node: {label: edge}\n"))
                .find("actors.out.node.label: expected KEY=VALUE"),
            std::string::npos);
  EXPECT_NE(error_of(replace(kBase, "    to: stdout\n", "    to: stdout\n    node: {name: a}\n"))
                .find("actors.out.node"),
            std::string::npos);
  EXPECT_NE(error_of(replace(kBase, "    to: stdout\n", "    to: stdout\n    node: [a]\n"))
                .find("expected a node's name or {label: KEY=VALUE}"),
            std::string::npos);
  std::string apart = with_tool;
  apart.replace(apart.rfind("role=tools"), 10, "role=other");
  EXPECT_NE(error_of(apart).find("tools.b.node: a program's tools share one sandbox"), std::string::npos);
  EXPECT_NE(error_of(replace(kBase, "    to: stdout\n", "    to: callback\n    node: {label: role=edge}\n"))
                .find("a callback sink runs in its program's process"),
            std::string::npos);
  // A source is placed where it reads: a file or a socket; stdin, api and text have no place.
  const std::string source =
      "name: s\nblocks:\n  log:\nactors:\n  feed:\n    kind: source\n    writes: log\n";
  EXPECT_TRUE(
      load_string(source + "    from: {zmq: tcp://10.0.0.2:5601}\n    node: edge-1\n", "t.yaml").ok());
  EXPECT_NE(
      error_of(source + "    from: stdin\n    node: edge-1\n").find("a source is placed where it reads"),
      std::string::npos);
}

}  // namespace
}  // namespace chorus::topology
