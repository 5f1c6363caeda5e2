// `chorus check` and `chorus run`: a topology file (topologies/README.md) validated, or run as one
// program until it ends.
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
  auto t = load(args.file, args.set, args.input_given ? &args.input : nullptr, true);
  if (!t) {
    std::fprintf(stderr, "%s\n", t.error().message.c_str());
    return 1;
  }
  const std::string model_path = !args.model.empty() ? args.model : !t->model.empty() ? t->model : default_model_path();
  auto model = Model::load(model_path);
  if (!report("run", model)) return 1;
  CpuDeviceOptions dev;
  dev.n_threads = args.threads > 0 ? args.threads : t->engine.threads;
  auto device = CpuDevice::create(dev);
  if (!report("run", device)) return 1;
  auto gpu = open_gpu("run", args.device, **model);
  if (!report("run", gpu)) return 1;

  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  std::mutex err;
  ProgramHooks hooks;
  if (args.events)
    hooks.event = [&](const ProgramEvent& e) {
      std::lock_guard<std::mutex> l(err);
      std::string text = e.text.size() > 60 ? e.text.substr(0, 57) + "..." : e.text;
      for (char& c : text)
        if (c == '\n') c = ' ';
      std::fprintf(stderr, "  <%.2fs %s: %s>\n", e.seconds, e.name.c_str(), text.c_str());
    };
  auto program = Program::start(sys, *t, **model, **device, hooks, gpu->get());
  if (!report("run", program)) return 1;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::thread watch([&] {  // Ctrl-C ends the program cleanly (its report is still printed)
    while (!g_interrupted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*program)->stop();
  });
  ProgramReport r = (*program)->wait();
  g_interrupted = true;
  watch.join();
  if (!args.quiet) {
    std::string blocks, events;
    for (const auto& [b, n] : r.block_tokens) blocks += (blocks.empty() ? "" : ", ") + b + " " + std::to_string(n);
    for (const auto& [e, n] : r.events) events += (events.empty() ? "" : ", ") + e + " x" + std::to_string(n);
    std::fprintf(stderr, "\n[%s: ended by %s after %.2f s; %lld tokens generated; blocks: %s; events: %s]\n",
                 t->name.c_str(), r.ended_by.c_str(), r.seconds, static_cast<long long>(r.generated_tokens),
                 blocks.c_str(), events.empty() ? "none" : events.c_str());
  }
  if (!r.ok()) {
    std::fprintf(stderr, "chorus run: %s\n", r.error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace chorus::app
