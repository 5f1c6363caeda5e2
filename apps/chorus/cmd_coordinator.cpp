// `chorus coordinator`: a cluster's coordinator (cluster/coordinator.h) — the OpenAI API over the
// cluster's nodes while it leads (standby otherwise), following membership and heartbeats. Runs until SIGINT
// or SIGTERM.
#include <caf/all.hpp>
#include <cstdio>

#include "apps/chorus/commands.h"
#include "cluster/coordinator.h"
#include "engine/step/trace.h"

namespace chorus::app {
int run_coordinator(const CoordinatorArgs& args) {
  std::shared_ptr<Trace> trace;
  if (!open_trace("coordinator", args.trace, &trace)) return 2;
  cluster::CoordinatorOptions co;
  co.gateway.trace = trace;
  co.membership.etcd_url = args.etcd;
  co.membership.cluster = args.cluster;
  co.membership.ttl_s = args.lease_ttl_s;
  co.name = args.name.empty() ? default_member_name(std::to_string(args.port)) : args.name;
  co.host = args.host;
  co.port = args.port;
  co.heartbeat_s = args.heartbeat_s;
  co.dead_after_s = args.dead_after_s;
  co.placement_wait_s = args.placement_wait_s;
  co.model_path = args.model;
  co.gateway.model_name = served_model_name(args.model);
  co.gateway.max_tokens_limit = args.ctx;
  co.gateway.lease_s = args.lease_s;
  co.gateway.policy.check_period_s = args.check_period_s;
  co.gateway.migrate_after_s = args.migrate_after_s;
  co.gateway.restore_wait_s = args.restore_wait_s;
  co.gateway.move_cost.by = args.move_by == "kv"          ? MoveCost::By::kv
                            : args.move_by == "recompute" ? MoveCost::By::recompute
                                                          : MoveCost::By::cost;
  co.gateway.move_cost.transfer_bytes_per_s = args.transfer_mb_per_s * 1e6;
  co.gateway.move_cost.recompute_tokens_per_s = args.recompute_tokens_per_s;
  if (!gather_api_keys("coordinator", args.api_keys, args.key_files, &co.gateway.api_keys)) return 2;
  if (!read_chat_template("coordinator", args.chat_template, &co.gateway.chat_template)) return 2;
  co.gateway.metrics_public = args.metrics_public;
  if (!args.curve_key.empty()) {
    auto keys = read_curve_secret(args.curve_key);
    if (!report("coordinator", keys)) return 2;
    co.curve = *keys;
  }
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  auto c = cluster::Coordinator::start(sys, co);
  if (!report("coordinator", c)) return 1;
  stop_on_signals();
  std::printf("chorus coordinator: `%s` of cluster `%s` on http://%s:%d (%s; etcd at %s)\n", co.name.c_str(),
              args.cluster.c_str(), args.host.c_str(), (*c)->port(), (*c)->leader() ? "leader" : "standby",
              args.etcd.c_str());
  if (co.gateway.api_keys.empty())
    std::printf(
        "chorus coordinator: no API key: anyone who can reach %s:%d may use it (--api-key, --api-key-file)\n",
        args.host.c_str(), (*c)->port());
  else
    std::printf("chorus coordinator: %zu API key(s) required (Authorization: Bearer)\n",
                co.gateway.api_keys.size());
  std::fflush(stdout);
  wait_for_stop();
  (*c)->stop();
  std::printf("chorus coordinator: stopped\n");
  write_trace("coordinator", trace, args.trace);
  return 0;
}

}  // namespace chorus::app
