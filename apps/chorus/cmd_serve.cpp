// `chorus serve`: the OpenAI-compatible HTTP gateway (gateway/gateway.h) in front of the engine's
// batcher, with program-aware scheduling. Runs until SIGINT or SIGTERM.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "actors/batcher.h"
#include "apps/chorus/commands.h"
#include "apps/chorus/served.h"
#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "gateway/auth.h"
#include "gateway/gateway.h"

namespace chorus::app {
int run_serve(const ServeArgs& args) {
  std::shared_ptr<Trace> trace;
  if (!open_trace("serve", args.trace, &trace)) return 2;
  auto served = load_served("serve", args.model, args.threads, args.pages, args.budget, args.ctx, args.device,
                            args.linear_slots, trace, args.kv_type);
  if (!served) return 1;
  const auto& model = served->model;
  const auto& device = served->device;

  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  caf::actor batcher = spawn_batcher(sys, std::move(served->engine));
  GatewayOptions go;
  go.host = args.host;
  go.port = args.port;
  go.model_name = args.model_name;
  if (go.model_name.empty()) go.model_name = served_model_name(args.model);  // SmolLM2-135M-Instruct.Q4_1
  go.lease_s = args.lease_s;
  go.trace = trace;
  go.max_tokens_limit = args.ctx;
  go.policy.capacity_pages = args.pages;
  go.policy.check_period_s = args.check_period_s;
  go.policy.aging_s = args.aging_s;
  go.policy.high_watermark = args.high_watermark;
  go.policy.low_watermark = args.low_watermark;
  go.restore_wait_s = args.restore_wait_s;
  go.stored_responses = args.stored_responses;
  go.threads = args.http_threads;
  go.policy.offload_displaces = args.displace;
  go.policy.host_capacity_pages = args.host_pages;
  go.mode = args.policy == "lru"   ? SchedulingMode::lru
            : args.policy == "ttl" ? SchedulingMode::ttl
                                   : SchedulingMode::program;
  go.ttl_s = args.ttl_s;
  if (!gather_api_keys("serve", args.api_keys, args.key_files, &go.api_keys)) {
    caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
    return 2;
  }
  go.metrics_public = args.metrics_public;
  if (!read_chat_template("serve", args.chat_template, &go.chat_template)) {
    caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
    return 2;
  }
  auto gw = Gateway::start(sys, batcher, *model, go);
  if (!report("serve", gw)) {
    caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
    return 1;
  }
  stop_on_signals();
  std::printf("chorus serve: %s on http://%s:%d/v1 (%lld KV pages, policy %s, %s)\n", go.model_name.c_str(),
              args.host.c_str(), (*gw)->port(), static_cast<long long>(args.pages), args.policy.c_str(),
              device->describe().c_str());
  if (go.api_keys.empty())
    std::printf(
        "chorus serve: no API key: anyone who can reach %s:%d may use it (--api-key, --api-key-file)\n",
        args.host.c_str(), (*gw)->port());
  else
    std::printf("chorus serve: %zu API key(s) required (Authorization: Bearer)%s\n", go.api_keys.size(),
                go.metrics_public ? "; /metrics and /health public" : "");
  std::fflush(stdout);
  wait_for_stop();
  (*gw)->stop();
  caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
  write_trace("serve", trace, args.trace);
  return 0;
}

}  // namespace chorus::app
