// `chorus node`: one node process — the engine's batcher behind a ZeroMQ node port. Runs until
// SIGINT or SIGTERM.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <zmq.hpp>

#include "actors/batcher.h"
#include "actors/node_port.h"
#include "apps/chorus/commands.h"
#include "apps/chorus/served.h"
#include "device/cpu_device.h"
#include "engine/step/engine.h"

namespace chorus::app {
namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}
}  // namespace

int run_node(const NodeArgs& args) {
  auto served = load_served("node", args.model, args.threads, args.pages, args.budget, 0, args.device);
  if (!served) return 1;
  const auto& model = served->model;
  const auto& device = served->device;

  zmq::context_t zctx(1);  // declared before the actor system: destroyed after it
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 2);
    caf::actor_system sys{cfg};
    caf::actor batcher = spawn_batcher(sys, std::move(served->engine));
    caf::actor port;
    NodePortOptions po;
    po.endpoint = args.endpoint;
    po.max_frame_bytes = args.max_frame_bytes;
    po.events_endpoint = args.events_endpoint;
    auto bound = spawn_node_port(sys, batcher, zctx, po, &port);
    if (!report("node", bound)) {
      caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
      return 1;
    }
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::printf("chorus node: %s, %s, events on %s, listening on %s\n", model->config.name.c_str(),
                device->describe().c_str(), bound->events.empty() ? "(none)" : bound->events.c_str(),
                bound->requests.c_str());
    std::fflush(stdout);
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    caf::anon_send_exit(port, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
  }
  std::printf("chorus node: stopped\n");
  return 0;
}

}  // namespace chorus::app
