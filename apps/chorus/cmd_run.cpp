// `chorus check` and `chorus run`: a topology file (topologies/README.md) validated, or topology
// files run, each as a program (--copies: several of each), all on one engine until they end.
#include <atomic>
#include <caf/all.hpp>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>

#include "actors/program.h"
#include "actors/topology.h"
#include "apps/chorus/commands.h"
#include "apps/chorus/gpu_choice.h"
#include "engine/model.h"
#include "engine/engine.h"
#include "engine/model_paths.h"
#include "gpu/cpu_device.h"

namespace chorus::app {
namespace {

std::atomic<bool> g_interrupted{false};
void on_signal(int) { g_interrupted = true; }

Result<topology::Topology> load(const std::string& file, const std::vector<std::string>& sets, const std::string* input,
                                bool require) {
  topology::LoadOptions lo;
  lo.require_params = require;
  for (const auto& kv : sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(Errc::invalid_argument, "--set " + kv + ": expected KEY=VALUE");
    lo.set.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (input) lo.set.emplace_back("input", *input);
  return topology::load_file(file, lo);
}

}  // namespace

int run_check(const RunArgs& args) {
  auto t = load(args.file, args.set, args.input_given ? &args.input : nullptr, false);
  if (!t) {
    std::fprintf(stderr, "%s\n", t.error().message.c_str());
    return 1;
  }
  int roles[5] = {};
  for (const auto& a : t->actors) ++roles[static_cast<int>(a.kind)];
  std::printf("%s: ok: topology \"%s\", %zu blocks, %d thinkers, %d writers, %d probes, %d sources, %d sinks, %zu events\n",
              args.file.c_str(), t->name.c_str(), t->blocks.size(), roles[0], roles[1], roles[2], roles[3], roles[4],
              t->emitters().size());
  return 0;
}

int run_run(const RunArgs& args) {
  // Every file loads first: a mistake in the last one stops the run before anything starts.
  std::vector<topology::Topology> topos;
  for (const auto& file : args.files) {
    auto t = load(file, args.set, args.input_given ? &args.input : nullptr, true);
    if (!t) {
      std::fprintf(stderr, "%s\n", t.error().message.c_str());
      return 1;
    }
    topos.push_back(std::move(*t));
  }
  // One engine for all of them: its model and settings are the first file's, and the others must
  // agree (a program written for another model or pool would not run as its file says).
  const topology::Topology& first = topos.front();
  for (const auto& t : topos) {
    if (args.model.empty() && t.model != first.model) {
      std::fprintf(stderr, "chorus run: %s names model \"%s\" but %s names \"%s\": programs on one engine share one model (or pass --model)\n",
                   t.file.c_str(), t.model.c_str(), first.file.c_str(), first.model.c_str());
      return 1;
    }
    const EngineOptions a = engine_options(t), b = engine_options(first);
    if (a.n_pages != b.n_pages || a.token_budget != b.token_budget || a.max_view_tokens != b.max_view_tokens ||
        t.engine.threads != first.engine.threads) {
      std::fprintf(stderr, "chorus run: %s and %s have different engine: sections; programs on one engine share one (make them equal)\n",
                   t.file.c_str(), first.file.c_str());
      return 1;
    }
  }
  const std::string model_path = !args.model.empty() ? args.model : !first.model.empty() ? first.model : default_model_path();
  auto model = Model::load(model_path);
  if (!report("run", model)) return 1;
  CpuDeviceOptions dev;
  dev.n_threads = args.threads > 0 ? args.threads : first.engine.threads;
  auto device = CpuDevice::create(dev);
  if (!report("run", device)) return 1;
  auto gpu = open_gpu("run", args.device, **model);
  if (!report("run", gpu)) return 1;

  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  const bool several = topos.size() > 1 || args.copies > 1;
  Result<std::shared_ptr<SharedEngine>> engine = std::shared_ptr<SharedEngine>();
  if (several) engine = SharedEngine::create(sys, **model, **device, engine_options(first), gpu->get());
  if (!report("run", engine)) return 1;

  // Each program, named for the report and for --events: the topology's name, and #k when a file
  // runs more than once.
  struct Running {
    std::string label;
    std::unique_ptr<Program> program;
    ProgramReport report;
  };
  std::mutex err;  // before `runs`: their hooks may use it until they are gone
  std::vector<Running> runs;
  for (const auto& t : topos)
    for (int k = 1; k <= args.copies; ++k) {
      Running r;
      r.label = t.name + (args.copies > 1 ? "#" + std::to_string(k) : "");
      ProgramHooks hooks;
      if (args.events)
        hooks.event = [&err, label = several ? r.label + " " : std::string()](const ProgramEvent& e) {
          std::lock_guard<std::mutex> l(err);
          std::string text = e.text.size() > 60 ? e.text.substr(0, 57) + "..." : e.text;
          for (char& c : text)
            if (c == '\n') c = ' ';
          std::fprintf(stderr, "  <%.2fs %s%s: %s>\n", e.seconds, label.c_str(), e.name.c_str(), text.c_str());
        };
      // One program alone owns the engine: when it ends, the engine stops with it, without
      // waiting for the requests its roles left running.
      auto program = several ? Program::start(sys, t, *engine, hooks) : Program::start(sys, t, **model, **device, hooks, gpu->get());
      if (!program) {  // the ones already started are stopped as `runs` goes
        std::fprintf(stderr, "chorus run: %s: %s\n", r.label.c_str(), program.error().message.c_str());
        for (auto& started : runs) started.program->stop();
        return 1;
      }
      r.program = std::move(*program);
      runs.push_back(std::move(r));
    }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::atomic<bool> all_done{false};
  std::thread watch([&] {  // Ctrl-C ends the programs cleanly (their reports are still printed)
    while (!g_interrupted && !all_done) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_interrupted)
      for (auto& r : runs) r.program->stop();
  });
  for (auto& r : runs) r.report = r.program->wait();
  all_done = true;
  watch.join();
  int failed = 0;
  for (const auto& run : runs) {
    const ProgramReport& r = run.report;
    if (!args.quiet) {
      std::string blocks, events;
      for (const auto& [b, n] : r.block_tokens) blocks += (blocks.empty() ? "" : ", ") + b + " " + std::to_string(n);
      for (const auto& [e, n] : r.events) events += (events.empty() ? "" : ", ") + e + " x" + std::to_string(n);
      std::fprintf(stderr, "%s[%s: ended by %s after %.2f s; %lld tokens generated; blocks: %s; events: %s]\n",
                   several ? "" : "\n", run.label.c_str(), r.ended_by.c_str(), r.seconds,
                   static_cast<long long>(r.generated_tokens), blocks.c_str(), events.empty() ? "none" : events.c_str());
    }
    if (!r.ok()) {
      std::fprintf(stderr, "chorus run: %s%s\n", several ? (run.label + ": ").c_str() : "", r.error.c_str());
      ++failed;
    }
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace chorus::app
