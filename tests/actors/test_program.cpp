// The shipped topologies, run end to end with the default model and small budgets. The tests
// assert structure — events fired, blocks written, sinks fed, the order of things in time — not
// the model's wording.
#include <gtest/gtest.h>

#include <unistd.h>
#include <caf/all.hpp>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "actors/program.h"
#include "actors/program_journal.h"
#include "actors/program_roles.h"
#include "actors/submit.h"
#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/step/trace.h"
#include "net/codec.h"
#include "net/role_codec.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

struct Seen {
  std::string name;  // event name, or "sink:<sink>"
  std::string text;
  double at = 0;  // seconds since the run started (one clock for events and sinks)
};

struct Outcome {
  std::vector<Seen> seen;
  ProgramReport report;

  std::vector<Seen> named(const std::string& n) const {
    std::vector<Seen> out;
    for (const auto& s : seen)
      if (s.name == n) out.push_back(s);
    return out;
  }
  double first(const std::string& n) const {
    for (const auto& s : seen)
      if (s.name == n) return s.at;
    return -1;
  }
};

class ProgramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
    (void)gguf;
    ASSERT_NO_FATAL_FAILURE(test::load_model(default_model_path(), &model_, &device_));
  }

  // Runs topologies/<file> with `sets`; `during` (if any) runs on this thread while it does.
  Outcome run_topology(const std::string& file, std::vector<std::pair<std::string, std::string>> sets,
                       const std::function<void(Program&)>& during = {},
                       const std::function<void(topology::Topology&)>& edit = {}) {
    Outcome out;
    topology::LoadOptions lo;
    lo.set = std::move(sets);
    auto t = topology::load_file(std::string(CHORUS_TOPOLOGIES_DIR) + "/" + file, lo);
    EXPECT_TRUE(t.ok()) << t.error().message;
    if (!t) return out;
    if (edit) edit(*t);
    std::mutex m;
    const auto t0 = Clock::now();
    auto note = [&](std::string name, std::string text) {
      std::lock_guard<std::mutex> l(m);
      out.seen.push_back(
          {std::move(name), std::move(text), std::chrono::duration<double>(Clock::now() - t0).count()});
    };
    ProgramHooks hooks;
    hooks.unsafe_tools = unsafe_tools_;
    hooks.trace = trace_;
    hooks.journal = journal_;
    hooks.event = [&](const ProgramEvent& e) { note(e.name, e.text); };
    hooks.sink = [&](const std::string& sink, const std::string& text) { note("sink:" + sink, text); };
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 2);
    caf::actor_system sys{cfg};
    auto p = Program::start(sys, *t, *model_, *device_, hooks);
    EXPECT_TRUE(p.ok()) << p.error().message;
    if (!p) return out;
    if (during) during(**p);
    out.report = (*p)->wait();
    EXPECT_TRUE(out.report.ok()) << out.report.error;
    return out;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuDevice> device_;
  bool unsafe_tools_ = false;                // ProgramHooks::unsafe_tools for run_topology
  std::shared_ptr<Trace> trace_;             // ProgramHooks::trace for run_topology
  std::shared_ptr<ProgramJournal> journal_;  // ProgramHooks::journal for run_topology
};

TEST_F(ProgramTest, ThinkerWriterInterleaves) {
  // 160: the first paragraph (about 70 tokens) and the writer's line (up to 32) fit well within it.
  Outcome r = run_topology("thinker_writer.yaml", {{"actors.thinker.max_tokens", "160"},
                                                   {"actors.notes_out.to", "callback"},
                                                   {"actors.thoughts_out.to", "callback"}});
  EXPECT_EQ(r.report.ended_by, "all roles done");
  EXPECT_GE(r.named("paragraph").size(), 1u);
  const auto notes = r.named("sink:notes_out");
  ASSERT_GE(notes.size(), 1u);
  EXPECT_FALSE(notes[0].text.empty());
  EXPECT_FALSE(r.named("sink:thoughts_out").empty());
  EXPECT_GT(r.report.block_tokens.at("thoughts"), 0);
  EXPECT_GT(r.report.block_tokens.at("notes"), 0);
  // The writer's first line comes while the thinker is still generating.
  ASSERT_GE(r.first("thinker.done"), 0);
  EXPECT_LT(notes[0].at, r.first("thinker.done"));
  EXPECT_GE(r.first("writer.done"), r.first("thinker.done"));
}

TEST_F(ProgramTest, ParallelSolversShareAndAnswer) {
  Outcome r = run_topology("parallel_solvers.yaml", {{"actors.worker1.max_tokens", "24"},
                                                     {"actors.worker2.max_tokens", "24"},
                                                     {"actors.worker3.max_tokens", "24"},
                                                     {"actors.final.max_tokens", "16"},
                                                     {"actors.out.to", "callback"}});
  EXPECT_EQ(r.report.ended_by, "all roles done");
  EXPECT_GT(r.report.block_tokens.at("answer"), 0);
  // Each worker generated: its block holds more than its prefill. What it wrote is the model's
  // (sampled, over views that change with the timing of the steps): a worker may end its turn
  // before its first line, so the lines are counted together.
  size_t notes = 0;
  for (int w = 1; w <= 3; ++w) {
    const std::string prefill = "<|im_start|>assistant\nWorker " + std::to_string(w) + ": ";
    const auto n = static_cast<int64_t>(model_->tokenizer.encode(prefill, {.parse_special = true}).size());
    EXPECT_GT(r.report.block_tokens.at("w" + std::to_string(w)), n) << "worker " << w;
    notes += r.named("note" + std::to_string(w)).size();
  }
  EXPECT_GE(notes, 1u);
  // The workers ran at the same time: each finished after all three had started writing notes
  // (their steps were batched together), and the answer came after the last one.
  const double last_done =
      std::max({r.first("worker1.done"), r.first("worker2.done"), r.first("worker3.done")});
  const auto answer = r.named("sink:out");
  ASSERT_FALSE(answer.empty());
  const Seen& final_piece = answer.back();
  EXPECT_GT(final_piece.at, last_done);
  EXPECT_LE(r.report.generated_tokens, 3 * 24 + 16);
}

// Lower-case words and the operators between them ("120 km * 120 km / 150 = 38.8 m").
std::vector<std::string> word_seq(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  auto flush = [&] {
    if (!w.empty()) out.push_back(w);
    w.clear();
  };
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '.') {
      w += static_cast<char>(std::tolower(u));
    } else {
      flush();
      if (c != '\0' && std::strchr("*/=+-", c)) out.push_back(std::string(1, c));
    }
  }
  flush();
  return out;
}

// How many of the workers' lines repeat four words in a row that another worker wrote first and
// the problem does not have: what one worker can only have from another's block.
int lines_copied_across(const Outcome& r, const std::string& problem) {
  using Gram = std::vector<std::string>;
  auto grams = [](const std::vector<std::string>& ws) {
    std::set<Gram> g;
    for (size_t i = 0; i + 4 <= ws.size(); ++i) g.insert(Gram(ws.begin() + i, ws.begin() + i + 4));
    return g;
  };
  const std::set<Gram> given = grams(word_seq(problem));
  std::vector<const Seen*> notes;  // every worker's lines, in the order they were written
  for (const auto& s : r.seen)
    if (s.name == "note1" || s.name == "note2" || s.name == "note3") notes.push_back(&s);
  std::map<Gram, std::string> first;  // a sequence -> the worker that wrote it first
  int copied = 0;
  for (const Seen* s : notes) {
    const std::set<Gram> g = grams(word_seq(s->text));
    bool from_other = false;
    for (const Gram& x : g) {
      auto f = first.find(x);
      from_other = from_other || (!given.count(x) && f != first.end() && f->second != s->name);
    }
    copied += from_other ? 1 : 0;
    for (const Gram& x : g) first.emplace(x, s->name);
  }
  return copied;
}

// The parallel solvers see each other (the shipped file's comment): with the views it ships,
// workers' lines repeat sequences another worker wrote first; with each worker's view cut to
// the problem and its own block, fewer do (on the development machine 6 and 0). What each worker
// sees depends on when the others' requests reach the engine, which CPU contention moves (a CI
// run beside another test once saw 0 shared): the shared run is tried up to three times and the
// first with at least 2 such lines counts. Cut views cannot copy at all, whatever the timing.
TEST_F(ProgramTest, ParallelSolversSeeEachOther) {
  const std::vector<std::pair<std::string, std::string>> sets = {{"actors.out.to", "callback"}};
  std::string problem;
  int copied = 0;
  for (int attempt = 1; attempt <= 3 && copied < 2; ++attempt) {
    Outcome shared = run_topology("parallel_solvers.yaml", sets, {},
                                  [&](topology::Topology& t) { problem = t.block("problem")->text; });
    ASSERT_FALSE(problem.empty());
    EXPECT_EQ(shared.report.ended_by, "all roles done");
    copied = lines_copied_across(shared, problem);
    std::printf("run %d: lines with another worker's words: %d\n", attempt, copied);
  }
  Outcome alone = run_topology("parallel_solvers.yaml", sets, {}, [](topology::Topology& t) {
    for (auto& a : t.actors)
      if (a.name.starts_with("worker")) a.view = {"problem", a.writes};
  });
  EXPECT_EQ(alone.report.ended_by, "all roles done");
  const int copied_alone = lines_copied_across(alone, problem);
  std::printf("lines with another worker's words: %d shared, %d with the views cut\n", copied, copied_alone);
  EXPECT_GE(copied, 2);
  EXPECT_LT(copied_alone, copied);
}

TEST_F(ProgramTest, ClarificationArrivesMidReasoning) {
  Outcome r = run_topology("clarification.yaml",
                           {{"actors.thinker.max_tokens", "80"}, {"actors.out.to", "callback"}});
  EXPECT_EQ(r.report.ended_by, "all roles done");
  const double in = r.first("user_more.done");
  ASSERT_GE(in, 0);
  EXPECT_LT(in, r.first("thinker.done")) << "the second part must arrive while the thinker reasons";
  int lines_after = 0;
  for (const auto& s : r.named("line")) lines_after += s.at > in;
  EXPECT_GE(lines_after, 1) << "the thinker must go on after the second part is in";
  // The prompt block holds both parts: the first turn and the appended second one.
  EXPECT_GT(r.report.block_tokens.at("prompt"), 20);
  EXPECT_FALSE(r.named("sink:out").empty());
}

// 5 incidents in 500 lines from the shipped generator: the probe must catch at least 4, each
// within a bounded number of lines; printed: detection rate, delays, false alarms.
TEST_F(ProgramTest, LogMonitorCatchesIncidents) {
  char dir[] = "/tmp/chorus-logmon-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/app.log";
  const std::string cmd = "python3 " + std::string(CHORUS_TOPOLOGIES_DIR) + "/loggen.py " + log +
                          " --lines 500 --incidents 5 --rate 0 --seed 7";
  std::FILE* gen = ::popen(cmd.c_str(), "r");
  ASSERT_NE(gen, nullptr);
  std::vector<std::pair<int, std::string>> truth;  // line number, text
  char buf[4096];
  while (std::fgets(buf, sizeof buf, gen)) {
    auto j = nlohmann::json::parse(buf);
    truth.emplace_back(j["line"].get<int>(), j["text"].get<std::string>());
  }
  ASSERT_EQ(::pclose(gen), 0);
  ASSERT_EQ(truth.size(), 5u);

  Outcome r =
      run_topology("log_monitor.yaml",
                   {{"log", log}, {"actors.tail.max_lines", "500"}, {"actors.alerts_out.to", "callback"}});
  EXPECT_EQ(r.report.ended_by, "all roles done");
  // Line n of the log is in the block (and asked about) from the n-th new_line event on.
  std::vector<double> line_at;
  for (const auto& s : r.named("new_line")) line_at.push_back(s.at);
  ASSERT_EQ(line_at.size(), 500u);
  int caught = 0, false_alarms = 0;
  std::vector<double> delay_lines, delay_ms;
  std::vector<bool> matched(truth.size());
  for (const auto& s : r.named("incident")) {
    size_t k = 0;
    while (k < truth.size() && s.text.find(truth[k].second) == std::string::npos) ++k;
    if (k == truth.size()) {
      ++false_alarms;
      continue;
    }
    if (matched[k]) continue;
    matched[k] = true;
    ++caught;
    const int line = truth[k].first;
    int in = 0;  // lines in when it fired
    while (in < static_cast<int>(line_at.size()) && line_at[static_cast<size_t>(in)] <= s.at) ++in;
    delay_lines.push_back(in - line);
    delay_ms.push_back(1000 * (s.at - line_at[static_cast<size_t>(line - 1)]));
  }
  std::string dl, dm;
  for (double d : delay_lines) dl += " " + std::to_string(static_cast<int>(d));
  for (double d : delay_ms) dm += " " + std::to_string(static_cast<int>(d));
  std::printf(
      "log_monitor: caught %d of 5 incidents in 500 lines (%.1f s), false alarms %d; delay in lines:%s; in "
      "ms:%s\n",
      caught, r.report.seconds, false_alarms, dl.c_str(), dm.c_str());
  // The probe's question carries its line and its view is the fixed examples, so what it fires on
  // depends on the line alone: every incident, no other line (README, topologies/README.md).
  EXPECT_EQ(caught, 5);
  EXPECT_EQ(false_alarms, 0);
  // How many lines are in by then depends on how far the source ran ahead of the probes.
  for (double d : delay_lines) EXPECT_LE(d, 16) << "a probe must keep up with the log";
  EXPECT_GE(r.named("sink:alerts_out").size(), 5u)
      << "a writer's alert per incident (and the incident lines)";
  std::remove(log.c_str());
  ::rmdir(dir);
}

// A pipeline of processes around the agent: readings in on one ZeroMQ socket, status lines out
// on another.
TEST_F(ProgramTest, ZmqBridgeAnswersEachReading) {
  const std::string base = "ipc:///tmp/chorus-bridge-" + std::to_string(::getpid());
  zmq::context_t ctx(1);
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind(base + "-in");
  std::vector<std::string> got;
  Outcome r =
      run_topology("zmq_bridge.yaml",
                   {{"in", base + "-in"}, {"out", base + "-out"}, {"budget.seconds", "60"}}, [&](Program& p) {
                     zmq::socket_t sub(ctx, zmq::socket_type::sub);
                     sub.set(zmq::sockopt::linger, 0);
                     sub.set(zmq::sockopt::rcvtimeo, 200);
                     sub.set(zmq::sockopt::subscribe, "status");
                     sub.connect(base + "-out");
                     // Publish until answers come back (a SUB socket misses what is sent before it joins).
                     for (int i = 0; i < 100 && got.size() < 2; ++i) {
                       const std::string reading =
                           "battery=" + std::to_string(90 - i) + "% obstacle=" + (i % 3 ? "no" : "yes");
                       pub.send(zmq::buffer(std::string("sensor")), zmq::send_flags::sndmore);
                       pub.send(zmq::buffer(reading), zmq::send_flags::none);
                       zmq::message_t topic, text;
                       if (sub.recv(topic) && topic.more() && sub.recv(text)) got.push_back(text.to_string());
                     }
                     p.stop();
                   });
  EXPECT_EQ(r.report.ended_by, "stopped");
  ASSERT_GE(got.size(), 2u);
  for (const auto& g : got) EXPECT_FALSE(g.empty());
  EXPECT_GE(r.named("reading").size(), got.size());
}

// A thinker calls a tool: the call is parsed, the tool runs in the program's sandbox, its result
// goes into the block and the thinker goes on with it; the sandbox is gone with the program.
TEST_F(ProgramTest, ToolAgentCallsATool) {
  char dir[] = "/tmp/chorus-tools-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ::setenv("CHORUS_SANDBOX_DIR", dir, 1);
  Outcome r = run_topology("tool_agent.yaml", {{"a", "1234"}, {"b", "4321"}, {"actors.out.to", "callback"}});
  ::unsetenv("CHORUS_SANDBOX_DIR");
  EXPECT_EQ(r.report.ended_by, "all roles done");
  const auto calls = r.named("solver.tool_call");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_NE(calls[0].text.find("\"name\": \"add\""), std::string::npos) << calls[0].text;
  const auto results = r.named("solver.tool_result");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].text, "5555") << "the tool's own answer, not the model's";
  std::string out;
  for (const auto& s : r.named("sink:out")) out += s.text;
  EXPECT_NE(out.find("<tool_response>\n5555\n</tool_response>"), std::string::npos) << out;
  EXPECT_GT(r.first("solver.done"), results[0].at) << "the thinker went on after the result";
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the program's sandbox is removed with it";
  std::filesystem::remove_all(dir);
}

// The words of a text, lower case, of three letters or more ("the" left out).
std::set<std::string> content_words(const std::string& text) {
  std::set<std::string> out;
  std::string w;
  for (char c : text + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      continue;
    }
    if (w.size() >= 3 && w != "the") out.insert(w);
    w.clear();
  }
  return out;
}

// The shipped self-assembling program on the default model: the planner's edit_program call
// (constrained by the tool's parameters) adds one worker per part the task names — three for a
// task of three parts, two for one of two — each given a part of the task in its prefill, then a
// writer after them all. The patch is applied once; each worker writes its block after it;
// the writer sums up last.
TEST_F(ProgramTest, SelfAssemblyAddsAWorkerPerPart) {
  const std::vector<std::pair<std::string, size_t>> tasks = {
      {"Write about the sea: its fish, its ships and its storms.", 3},
      {"Describe a school: its teachers and its pupils.", 2}};
  for (const auto& [task, parts] : tasks) {
    SCOPED_TRACE(task);
    Outcome r = run_topology("self_assembly.yaml", {{"input", task}, {"actors.out.to", "callback"}});
    EXPECT_EQ(r.report.ended_by, "all roles done");
    const auto calls = r.named("planner.edit_program");
    ASSERT_EQ(calls.size(), 1u);
    const auto patch = nlohmann::json::parse(calls[0].text);  // the call's arguments: the patch
    EXPECT_TRUE(r.named("program.patch_refused").empty()) << r.named("program.patch_refused")[0].text;
    const auto patched = r.named("program.patched");
    ASSERT_EQ(patched.size(), 1u);
    ASSERT_EQ(patch["actors"].size(), parts + 1) << calls[0].text;  // the workers and the writer
    const std::set<std::string> words = content_words(task);
    std::set<std::string> prefills;
    for (size_t i = 1; i <= parts; ++i) {
      const std::string w = "worker_" + std::to_string(i);
      SCOPED_TRACE(w);
      ASSERT_TRUE(patch["actors"].contains(w)) << calls[0].text;
      // Its part, in the planner's words: a word of the task, or its singular ("ship", "ships").
      const std::string prefill = patch["actors"][w]["prefill"];
      prefills.insert(prefill);
      bool names_part = false;
      for (const auto& pw : content_words(prefill))
        for (const auto& tw : words) names_part = names_part || tw.starts_with(pw);
      EXPECT_TRUE(names_part) << prefill;
      ASSERT_EQ(r.named(w + ".done").size(), 1u);
      EXPECT_GT(r.first(w + ".done"), patched[0].at) << "it exists once the patch is applied";
      EXPECT_GT(r.report.block_tokens.at("part_" + std::to_string(i)), 20) << "it wrote its part";
      EXPECT_GT(r.first("writer.done"), r.first(w + ".done")) << "the writer comes after it";
    }
    EXPECT_EQ(prefills.size(), parts) << "a different part for each";
    EXPECT_EQ(patched[0].text.find("added worker_" + std::to_string(parts + 1)), std::string::npos);
    ASSERT_EQ(r.named("writer.done").size(), 1u);
    ASSERT_FALSE(r.named("sink:out").empty());
    EXPECT_GT(r.report.block_tokens.at("notes"), 20) << "the writer's summary";
  }
}

// Traced, the program records itself on its lane of the trace's `roles` process: each event with
// the roles the controller sent it to, each tool run as a slice as long as it ran (ended before
// the result was announced), and its sandbox made.
TEST_F(ProgramTest, ATracedProgramRecordsItsMessagesAndToolRuns) {
  trace_ = std::make_shared<Trace>();
  Outcome r = run_topology("tool_agent.yaml", {{"a", "1234"}, {"b", "4321"}, {"actors.out.to", "callback"}});
  EXPECT_EQ(r.report.ended_by, "all roles done");
  const auto trace = nlohmann::json::parse(trace_->json());
  trace_.reset();
  std::vector<nlohmann::json> roles, tools, marks;
  bool named = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["pid"] != 3) continue;
    if (e["ph"] == "M") named = named || e["args"]["name"] == "tool_agent";
    if (e["ph"] == "i" && e["cat"] == "role") roles.push_back(e);
    if (e["ph"] == "X" && e["cat"] == "tool") tools.push_back(e);
    if (e["ph"] == "i" && e["cat"] == "tool") marks.push_back(e);
  }
  EXPECT_TRUE(named) << "the lane is named after the topology";
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0]["name"], "add");
  EXPECT_EQ(tools[0]["args"]["ended"], "exited with status 0");
  EXPECT_EQ(tools[0]["args"]["output_bytes"], 5);  // "5555\n"
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(marks[0]["name"], "sandbox made");
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& e : roles) by_name[e["name"]] = e;
  ASSERT_EQ(roles.size(), r.seen.size() - r.named("sink:out").size()) << "every event, none sampled away";
  ASSERT_TRUE(by_name.count("solver.tool_call") && by_name.count("solver.tool_result"));
  EXPECT_EQ(by_name["solver.tool_call"]["args"]["to"], nlohmann::json::array({"out"}));
  EXPECT_EQ(by_name["solver.tool_result"]["args"]["text"], "5555");
  EXPECT_EQ(by_name["solver.done"]["args"]["to"], nlohmann::json::array()) << "nobody hears it";
  // The result is announced after the run ended (the generator hears it from the tool actor,
  // which recorded the slice first), and after the call (one sender, one receiver: in order).
  // The call's instant is the controller's, and may come just after the run began.
  const int64_t t0 = tools[0]["ts"], t1 = t0 + tools[0]["dur"].get<int64_t>();
  EXPECT_GT(t1, t0);
  EXPECT_GE(by_name["solver.tool_result"]["ts"].get<int64_t>(), t1);
  EXPECT_LT(by_name["solver.tool_call"]["ts"].get<int64_t>(),
            by_name["solver.tool_result"]["ts"].get<int64_t>());
}

// The tool runs in a trace's `roles` process (pid 3): one slice per run.
size_t tool_runs(const Trace& trace) {
  size_t n = 0;
  const nlohmann::json j = nlohmann::json::parse(trace.json());
  for (const auto& e : j["traceEvents"]) n += e["pid"] == 3 && e["ph"] == "X" && e["cat"] == "tool" ? 1 : 0;
  return n;
}

// A program run again with the journal of its first run (as a coordinator runs one whose node
// died) takes its finished work back instead of doing it again: the solver's two generations
// (before and after the call) are written into its block by forwards and heard as generated, the
// tool does not run, and the callback sink, which reaches the outside, is not given again what
// it was given. Events, blocks and tokens are the first run's.
TEST_F(ProgramTest, AJournalGivesBackWhatAnEarlierRunFinished) {
  journal_ = std::make_shared<ProgramJournal>();
  const std::vector<std::pair<std::string, std::string>> sets = {
      {"a", "1234"}, {"b", "4321"}, {"actors.out.to", "callback"}};
  trace_ = std::make_shared<Trace>();
  Outcome first = run_topology("tool_agent.yaml", sets);
  EXPECT_EQ(tool_runs(*trace_), 1u);
  EXPECT_EQ(journal_->replayed().requests, 0) << "nothing to take back in a first run";
  std::string delivered;
  for (const auto& s : first.named("sink:out")) delivered += s.text;
  ASSERT_FALSE(delivered.empty());

  journal_->new_run();
  trace_ = std::make_shared<Trace>();
  Outcome again = run_topology("tool_agent.yaml", sets);
  EXPECT_EQ(tool_runs(*trace_), 0u) << "the tool ran again";
  trace_.reset();
  const ProgramJournal::Counts c = journal_->replayed();
  journal_.reset();
  EXPECT_EQ(c.requests, 2) << "the solver's generations before and after the call";
  EXPECT_EQ(c.tool_results, 1);
  EXPECT_EQ(c.tokens, first.report.generated_tokens);
  EXPECT_EQ(c.sink_bytes, static_cast<int64_t>(delivered.size()));
  EXPECT_TRUE(again.named("sink:out").empty()) << "the callback sink was given its text again";
  EXPECT_EQ(again.report.ended_by, first.report.ended_by);
  EXPECT_EQ(again.report.generated_tokens, first.report.generated_tokens);
  EXPECT_EQ(again.report.block_tokens, first.report.block_tokens);
  EXPECT_EQ(again.report.events, first.report.events);
  const auto results = again.named("solver.tool_result");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].text, "5555") << "the recorded result";
}

// Without the sandbox's isolation (CHORUS_SANDBOX=plain stands in for a machine without
// bubblewrap), a program with tools refuses to start, saying what is missing and how to go on
// anyway; with unsafe_tools (`chorus run --unsafe-tools`) it runs; a program without tools
// needs nothing.
TEST_F(ProgramTest, ToolsWithoutIsolationStartOnlyWhenAskedFor) {
  struct Plain {
    Plain() { ::setenv("CHORUS_SANDBOX", "plain", 1); }
    ~Plain() { ::unsetenv("CHORUS_SANDBOX"); }
  } plain;
  topology::LoadOptions lo;
  lo.set = {{"a", "1234"}, {"b", "4321"}, {"actors.out.to", "callback"}};
  auto t = topology::load_file(std::string(CHORUS_TOPOLOGIES_DIR) + "/tool_agent.yaml", lo);
  ASSERT_TRUE(t.ok()) << t.error().message;
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 2);
    caf::actor_system sys{cfg};
    auto p = Program::start(sys, *t, *model_, *device_, ProgramHooks{});
    ASSERT_FALSE(p.ok()) << "tools started without isolation and without --unsafe-tools";
    EXPECT_EQ(p.error().code, Errc::unsupported);
    for (const char* part :
         {"its tools need the sandbox", "CHORUS_SANDBOX=plain", "nothing was started", "--unsafe-tools"})
      EXPECT_NE(p.error().message.find(part), std::string::npos) << p.error().message;
  }
  unsafe_tools_ = true;
  Outcome r = run_topology("tool_agent.yaml", {{"a", "1234"}, {"b", "4321"}, {"actors.out.to", "callback"}});
  EXPECT_EQ(r.report.ended_by, "all roles done");
  const auto results = r.named("solver.tool_result");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].text, "5555");
  unsafe_tools_ = false;
  Outcome none = run_topology("thinker_writer.yaml", {{"actors.thinker.max_tokens", "16"},
                                                      {"actors.notes_out.to", "callback"},
                                                      {"actors.thoughts_out.to", "callback"}});
  EXPECT_EQ(none.report.ended_by, "all roles done");
}

// Programs on the tiny random-weight model: their wording means nothing, their structure does.
class TinyProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(
        test::load_model(test::goldens_dir() + "/tiny_llama_f32.gguf", &model_, &device_));
    cfg_.set("scheduler.max-threads", 2);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuDevice> device_;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
};

// Run-time errors name the block or actor, and nothing is left running.
TEST_F(TinyProgram, RefusedBlocksAndSinksAreNamed) {
  Model* model = model_.get();
  CpuDevice* device = device_.get();
  caf::actor_system& sys = *sys_;
  const std::string base = R"(engine: {max_view_tokens: 16}
blocks:
  a:
    text: "TEXT"
actors:
  s:
    kind: sink
    to: {file: "/nonexistent/dir/out.txt"}
)";
  auto load = [](const std::string& text) { return topology::load_string(text, "e.yaml"); };
  auto t = load(std::string(base).replace(base.find("TEXT"), 4, std::string(200, 'x')));
  ASSERT_TRUE(t.ok()) << t.error().message;
  auto p = Program::start(sys, *t, *model, *device);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("e.yaml: block a: "), std::string::npos) << p.error().message;
  t = load(std::string(base).replace(base.find("TEXT"), 4, "hi"));
  ASSERT_TRUE(t.ok());
  p = Program::start(sys, *t, *model, *device);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message,
            "e.yaml: actors.s: cannot open /nonexistent/dir/out.txt: No such file or directory");
}

// One thinker writing block b after the text in a: `max_tokens` tokens, with no stop.
topology::Topology thinker_topology(int max_tokens, const std::string& engine = "") {
  auto t = topology::load_string(engine + R"(blocks:
  a: {text: "hello world"}
  b:
actors:
  think:
    kind: thinker
    view: [a, b]
    writes: b
    prefill: " the"
    stop: []
    max_tokens: )" + std::to_string(max_tokens) +
                                     "\n",
                                 "e.yaml");
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? *t : topology::Topology{};
}

// Several programs on one engine (chorus run with several files): each registers under an id of
// its own, they run at once, and one that ends frees its blocks while the others go on. The
// pool holds two of these programs but not a third beside them: the third runs only because
// the first two gave their pages back.
TEST_F(TinyProgram, ProgramsShareOneEngineAndFreeTheirBlocks) {
  EngineOptions eo;
  eo.n_pages = 24;  // 384 positions
  eo.token_budget = 32;
  auto engine = SharedEngine::create(*sys_, *model_, *device_, eo);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  const topology::Topology t1 = thinker_topology(60), t2 = thinker_topology(120), t3 = thinker_topology(250);
  auto p1 = Program::start(*sys_, t1, *engine);
  auto p2 = Program::start(*sys_, t2, *engine);
  ASSERT_TRUE(p1.ok()) << p1.error().message;
  ASSERT_TRUE(p2.ok()) << p2.error().message;
  const ProgramReport r1 = (*p1)->wait();
  const ProgramReport r2 = (*p2)->wait();
  EXPECT_EQ(r1.ended_by, "all roles done") << r1.error;
  EXPECT_EQ(r2.ended_by, "all roles done") << r2.error;
  EXPECT_GT(r1.block_tokens.at("b"), 1);
  EXPECT_LE(r1.block_tokens.at("b"), 1 + 60);
  EXPECT_GT(r2.block_tokens.at("b"), 1);
  EXPECT_LE(r2.block_tokens.at("b"), 1 + 120);
  EXPECT_GT(r1.generated_tokens + r2.generated_tokens, 0);
  // 1 + 250 + the context: 17 pages of 24, after 5 and 9 were given back.
  auto p3 = Program::start(*sys_, t3, *engine);
  ASSERT_TRUE(p3.ok()) << p3.error().message;
  const ProgramReport r3 = (*p3)->wait();
  EXPECT_EQ(r3.ended_by, "all roles done") << r3.error;
  EXPECT_EQ(r3.block_tokens.at("b"), 1 + 250)
      << "the pool ran out: blocks of the programs before were not freed";
}

// A program that ends on a shared engine while its thinker is mid-generation (a time budget,
// here) ends at once: the terminate cancels the generation its role left running, rather than
// waiting for its 20000 tokens (or leaving its blocks behind), and its blocks are freed.
TEST_F(TinyProgram, EndingOnASharedEngineCancelsWhatItsRolesLeftRunning) {
  EngineOptions eo;
  eo.n_pages = 1300;  // 20000 tokens and the context
  eo.token_budget = 32;
  eo.max_view_tokens = 32768;
  auto engine = SharedEngine::create(*sys_, *model_, *device_, eo);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  topology::Topology t = thinker_topology(20000);
  t.budget_seconds = 0.3;
  auto p = Program::start(*sys_, t, *engine);
  ASSERT_TRUE(p.ok()) << p.error().message;
  const ProgramReport r = (*p)->wait();
  EXPECT_EQ(r.ended_by, "time budget") << r.error;
  EXPECT_LT(r.block_tokens.at("b"), 1 + 20000)
      << "the generation was over before the program ended: nothing to cancel";
  // Its blocks are gone from the engine: the terminate went through, with the generation still
  // running (without cancel it is refused, and the blocks stay).
  caf::scoped_actor self{*sys_};
  ProgramCmd where;
  where.op = ProgramCmd::Op::phase;
  where.program = 1;
  EXPECT_FALSE(ask(self, (*engine)->batcher(), encode_program(0, where)).ok())
      << "program 1 is still registered";
}

// The journal's own rules: a finished record with the same input is given back; an unfinished one,
// or another input, is not. The history stops at the first thing done otherwise: when a run
// begins, at the first request that had not finished; when a request runs live over a record, at
// that record — every record begun after it, of any role, goes. Tool results follow their requests;
// a patch's call is recorded as one to make again. A sink is given, per producer, only the bytes
// past those it delivered before.
TEST(ProgramJournal, GivesBackTheHistoryUpToTheFirstThingDoneOtherwise) {
  auto generation = [](ProgramJournal& j, const std::string& role, int run, int k, std::vector<TokenId> input,
                       bool finish) {
    j.begin(role, run, k, input);
    j.token(role, run, k, 7, "a");
    j.token(role, run, k, 8, "b");
    if (finish) j.finish(role, run, k, FinishReason::stop_string);
  };
  ProgramJournal j;
  generation(j, "s", 0, 0, {1, 2}, true);  // seq 1
  j.tool("s", 0, 0, std::string("42"));
  generation(j, "t", 0, 0, {5}, true);   // seq 2
  generation(j, "s", 0, 1, {3}, false);  // seq 3: in flight when the node died
  generation(j, "u", 0, 0, {6}, true);   // seq 4: began after it, may have read what it wrote
  j.new_run();
  auto g = j.replay("s", 0, 0, {1, 2});
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->out, std::vector<TokenId>({7, 8}));
  EXPECT_EQ(g->token_text(1), "b");
  EXPECT_EQ(g->reason, FinishReason::stop_string);
  EXPECT_EQ(j.replay_tool("s", 0, 0), std::optional<std::string>("42"));
  EXPECT_TRUE(j.replay("t", 0, 0, {5}).has_value()) << "began before the unfinished request";
  EXPECT_FALSE(j.replay("s", 0, 1, {3}).has_value()) << "unfinished: it runs again";
  EXPECT_FALSE(j.replay("u", 0, 0, {6}).has_value()) << "began after the unfinished request";
  EXPECT_FALSE(j.replay("s", 0, 0, {1, 3}).has_value()) << "another input";
  EXPECT_FALSE(j.replay("x", 0, 0, {1, 2}).has_value()) << "another role";
  const ProgramJournal::Counts c = j.replayed();
  EXPECT_EQ(c.requests, 2);
  EXPECT_EQ(c.tokens, 4);
  EXPECT_EQ(c.tool_results, 1);

  // Another path: the new run writes s's request 0 otherwise; t's record began after it and goes.
  generation(j, "s", 0, 0, {1, 9}, true);
  EXPECT_FALSE(j.replay_tool("s", 0, 0).has_value()) << "its call went with it";
  EXPECT_FALSE(j.replay("t", 0, 0, {5}).has_value()) << "began after the record written otherwise";
  // A patch's call is recorded as one to make again, and the calls after it still are recorded.
  j.tool("s", 0, 0, std::nullopt);
  generation(j, "s", 0, 1, {4}, true);
  j.tool("s", 0, 1, std::string("ok"));
  j.new_run();
  EXPECT_TRUE(j.replay("s", 0, 0, {1, 9}).has_value());
  EXPECT_FALSE(j.replay_tool("s", 0, 0).has_value()) << "the patch is applied again";
  EXPECT_TRUE(j.replay("s", 0, 1, {4}).has_value());
  EXPECT_EQ(j.replay_tool("s", 0, 1), std::optional<std::string>("ok"));

  // Sinks: per producer, the bytes past those delivered; the order between producers is free.
  EXPECT_EQ(j.deliver("f", "solver", "hello "), "hello ");
  EXPECT_EQ(j.deliver("f", "event e", "[e] x\n"), "[e] x\n");
  EXPECT_EQ(j.deliver("f", "solver", "wor"), "wor");
  EXPECT_EQ(j.delivered("f"), 15);
  j.new_run();
  EXPECT_EQ(j.deliver("f", "solver", "hello world"), "ld") << "the bytes past those delivered";
  EXPECT_EQ(j.deliver("f", "event e", "[e] x\n"), "");
  EXPECT_EQ(j.deliver("f", "solver", "!"), "!");
  EXPECT_EQ(j.delivered("f"), 18);
  EXPECT_EQ(j.replayed().sink_bytes, 15);
}

// Past its size a journal records nothing more: what it holds is still given back, and what
// came after runs live (a request begun past the limit has no record, not half of one).
TEST(ProgramJournal, StopsRecordingPastItsSize) {
  ProgramJournal j(64);
  j.begin("s", 0, 0, {1, 2});  // 8 bytes
  j.token("s", 0, 0, 7, std::string(40, 'x'));
  j.finish("s", 0, 0, FinishReason::max_tokens);
  EXPECT_FALSE(j.stopped_recording());
  j.tool("s", 0, 0, std::string(16, 'r'));  // 8 + 48 + 16 = 72 bytes: full
  EXPECT_TRUE(j.stopped_recording());
  j.begin("s", 0, 1, {3});
  j.token("s", 0, 1, 9, "c");
  j.finish("s", 0, 1, FinishReason::max_tokens);
  j.new_run();
  EXPECT_TRUE(j.replay("s", 0, 0, {1, 2}).has_value());
  EXPECT_TRUE(j.replay_tool("s", 0, 0).has_value());
  EXPECT_FALSE(j.replay("s", 0, 1, {3}).has_value()) << "begun past the limit: not recorded";
}

// A program's tool actor: its sandbox made with each tool's `setup` run in it; removed on
// SandboxCool (the program paused past its lease) and made again, setup and all, on SandboxWarm or
// at the next call; a setup that fails is what the calls answer. Each is a schemas/roles.fbs frame.
TEST(ToolActor, ItsSandboxGoesAndComesBackWithItsSetup) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  const std::string base = ::testing::TempDir() + "chorus-tool-actor-" + std::to_string(::getpid());
  std::filesystem::create_directories(base);
  topology::Tool probe;
  probe.name = "probe";
  probe.command = {"sh", "-c", "cat marker"};
  probe.setup = {"sh", "-c", "echo ready > marker"};
  probe.timeout_s = 10;
  caf::actor tools = program_roles::spawn_tools(sys, base, "t1", {probe});
  caf::scoped_actor self{sys};
  auto ask = [&](const caf::actor& to, Frame f) {
    std::string out;
    self->request(to, std::chrono::seconds(20), role_ask_atom::value, std::move(f))
        .receive(
            [&](const Frame& r) {
              auto m = decode_role(r);
              out = !m                                 ? "undecodable: " + m.error().message
                    : m->kind != RoleKind::tool_result ? std::string("answered ") + role_kind_name(m->kind)
                                                       : m->text;
            },
            [&](caf::error& e) { out = "failed: " + caf::to_string(e); });
    return out;
  };
  auto call = [&](Frame f) { return ask(tools, std::move(f)); };
  auto cool = [&] { return call(encode_sandbox_cool()) == "removed"; };
  const std::string dir = base + "/t1";
  EXPECT_EQ(call(encode_tool_call("probe", "{}", "t")), "ready");
  EXPECT_TRUE(cool());
  EXPECT_FALSE(std::filesystem::exists(dir)) << "its sandbox is still there";
  EXPECT_FALSE(cool()) << "nothing to remove twice";
  EXPECT_EQ(call(encode_sandbox_warm()), "");
  EXPECT_TRUE(std::filesystem::exists(dir + "/marker")) << "made again without its setup";
  EXPECT_TRUE(cool());
  EXPECT_EQ(call(encode_tool_call("probe", "{}", "t")), "ready") << "not made again at the call";
  EXPECT_EQ(call(encode_signal("x", "y")), "error: a sandbox does not take Signal");
  self->send_exit(tools, caf::exit_reason::user_shutdown);
  self->wait_for(tools);
  EXPECT_FALSE(std::filesystem::exists(dir));

  // A tool still running when its program ends is killed, not waited for.
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  topology::Tool slow = probe;
  slow.name = "slow";
  slow.command = {"sh", "-c", "sleep 30"};
  slow.setup.clear();
  slow.timeout_s = 60;
  caf::actor sleeper = program_roles::spawn_tools(sys, base, "t3", {slow}, cancel);
  auto asked = self->request(sleeper, std::chrono::seconds(20), role_ask_atom::value,
                             encode_tool_call("slow", "{}", "t"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  cancel->store(true);
  std::string slow_out;
  asked.receive([&](const Frame& r) { slow_out = decode_role(r)->text; },
                [&](caf::error& e) { slow_out = caf::to_string(e); });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(slow_out, "[cancelled: its program ended (killed)]");
  self->send_exit(sleeper, caf::exit_reason::user_shutdown);
  self->wait_for(sleeper);
  EXPECT_FALSE(std::filesystem::exists(base + "/t3"));

  probe.setup = {"sh", "-c", "echo no network here; exit 3"};
  caf::actor broken = program_roles::spawn_tools(sys, base, "t2", {probe});
  EXPECT_EQ(ask(broken, encode_tool_call("probe", "{}", "t")),
            "error: the setup of tool probe failed: exited with status 3: no network here\n");
  self->send_exit(broken, caf::exit_reason::user_shutdown);
  self->wait_for(broken);
  std::filesystem::remove_all(base);
}

// A thinker whose block runs out of KV pages (16 pages, 256 positions, for 400 tokens) fails the program,
// naming itself and the cause, rather than ending as if it had said all it had to say. Both are errors, never
// a short answer: a thinker that may write more than the whole pool is refused at once (out_of_memory); one
// that fits the pool alone but not beside its long prompt runs until the pool is full.
// A running program patched from outside (Program::patch): a block and a worker added run at
// once; a worker changed runs anew; a refused patch changes nothing; a removed one is gone; and
// past kPatchesPerMinute patches the next is refused. The api source keeps the program running.
TEST_F(TinyProgram, PatchesChangeARunningProgram) {
  auto t = topology::load_string(R"(blocks:
  a: {text: "hello world"}
  log:
actors:
  feed: {kind: source, from: api, writes: log}
)",
                                 "e.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  std::mutex m;
  std::map<std::string, int> fired;
  std::condition_variable cv;
  ProgramHooks hooks;
  hooks.event = [&](const ProgramEvent& e) {
    std::lock_guard<std::mutex> l(m);
    ++fired[e.name];
    cv.notify_all();
  };
  auto p = Program::start(*sys_, *t, *model_, *device_, hooks);
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto wait_for = [&](const std::string& ev, int n) {
    std::unique_lock<std::mutex> l(m);
    return cv.wait_for(l, std::chrono::seconds(60), [&] { return fired[ev] >= n; });
  };
  auto added = (*p)->patch(R"({"blocks": {"w": {"text": "one two"}},
 "actors": {"worker": {"kind": "thinker", "view": ["a", "w"], "writes": "w", "stop": [], "max_tokens": 5}}})");
  ASSERT_TRUE(added.ok()) << added.error().message;
  EXPECT_EQ(*added, "added block w; added worker");
  ASSERT_TRUE(wait_for("worker.done", 1));
  auto changed = (*p)->patch("actors: {worker: {max_tokens: 3}}");
  ASSERT_TRUE(changed.ok()) << changed.error().message;
  EXPECT_EQ(*changed, "changed worker");
  ASSERT_TRUE(wait_for("worker.done", 2));  // its new self, with no triggers, ran once
  EXPECT_EQ((*p)->topology().actor("worker")->max_tokens, 3);
  auto bad = (*p)->patch("actors: {worker: {view: [a, nowhere]}}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "patch:1:29: actors.worker.view[1]: unknown block \"nowhere\" (blocks: a, log, w)");
  EXPECT_EQ((*p)->topology().actor("worker")->view, (std::vector<std::string>{"a", "w"}));
  auto removed = (*p)->patch("actors: {worker: null}");
  ASSERT_TRUE(removed.ok()) << removed.error().message;
  EXPECT_EQ((*p)->topology().actor("worker"), nullptr);
  for (size_t i = 4; i < kPatchesPerMinute; ++i) ASSERT_TRUE((*p)->patch("{}").ok()) << i;
  auto limited = (*p)->patch("{}");
  ASSERT_FALSE(limited.ok());
  EXPECT_EQ(limited.error().code, Errc::out_of_range);
  EXPECT_TRUE(limited.error().message.starts_with("patch: at most 20 patches a minute"))
      << limited.error().message;
  ASSERT_TRUE((*p)->close("feed").ok());
  const ProgramReport r = (*p)->wait();
  EXPECT_EQ(r.ended_by, "all roles done");
  EXPECT_EQ(r.events.at("worker.done"), 2);
  EXPECT_EQ(r.events.at("program.patched"), static_cast<int64_t>(kPatchesPerMinute) - 1);
  EXPECT_EQ(r.events.at("program.patch_refused"), 2);
  EXPECT_GT(r.block_tokens.at("w"), 2);  // its text, and what both workers wrote
  EXPECT_FALSE((*p)->patch("{}").ok());  // ended
}

TEST_F(TinyProgram, RunningOutOfKvPagesIsAnErrorNotAShortAnswer) {
  auto p = Program::start(*sys_, thinker_topology(400, "engine: {pages: 16}\n"), *model_, *device_);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ProgramReport r = (*p)->wait();
  EXPECT_EQ(r.ended_by, "error");
  EXPECT_NE(r.error.find("think"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("the pool has 16 pages"), std::string::npos) << r.error;

  std::string text;
  for (int i = 0; i < 24; ++i) text += "hello world ";
  auto t =
      topology::load_string("engine: {pages: 16}\nblocks:\n  a: {text: \"" + text + "\"}\n  b:\n" + R"(actors:
  think:
    kind: thinker
    view: [a, b]
    writes: b
    prefill: " the"
    stop: []
    max_tokens: 120
)",
                            "e.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  p = Program::start(*sys_, *t, *model_, *device_);
  ASSERT_TRUE(p.ok()) << p.error().message;
  r = (*p)->wait();
  EXPECT_EQ(r.ended_by, "error");
  EXPECT_NE(r.error.find("think"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("KV cache full"), std::string::npos) << r.error;
}

// How a program ends, on the tiny model: a token budget, a finish event, a time budget.
TEST_F(TinyProgram, EndsByTokenBudgetFinishEventAndTime) {
  Model* model = model_.get();
  CpuDevice* device = device_.get();
  caf::actor_system& sys = *sys_;
  auto run = [&](const std::string& text) {
    auto t = topology::load_string(text, "e.yaml");
    EXPECT_TRUE(t.ok()) << t.error().message;
    auto p = Program::start(sys, *t, *model, *device);
    EXPECT_TRUE(p.ok()) << p.error().message;
    return (*p)->wait();
  };
  const std::string base = R"(blocks:
  a: {text: "hello world"}
  b:
  c:
actors:
  long:
    kind: thinker
    view: [a, b]
    writes: b
    prefill: " the"
    max_tokens: 400
    stop: []
  short:
    kind: thinker
    view: [a, c]
    writes: c
    prefill: " a"
    max_tokens: 3
)";
  ProgramReport r = run(base + "budget: {tokens: 20}\n");
  EXPECT_EQ(r.ended_by, "token budget");
  EXPECT_GE(r.generated_tokens, 20);
  EXPECT_LT(r.generated_tokens, 400);
  r = run(base + "finish: [short.done]\n");
  EXPECT_EQ(r.ended_by, "finish event short.done");
  EXPECT_LE(r.block_tokens.at("c"), 1 + 3);
  EXPECT_LT(r.block_tokens.at("b"), 1 + 400) << "the long thinker was cut short";
  r = run(R"(budget: {seconds: 0.3}
blocks:
  log:
actors:
  tail:
    kind: source
    from: {file: /nonexistent/never.log}
    writes: log
)");
  EXPECT_EQ(r.ended_by, "time budget");
  EXPECT_GE(r.seconds, 0.3);
  EXPECT_LT(r.seconds, 5.0);
}

}  // namespace
}  // namespace chorus
