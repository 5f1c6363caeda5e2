// `chorus node`: one node process — the engine's batcher behind a ZeroMQ node port; with --etcd,
// a member of a cluster (cluster/membership.h). Runs until SIGINT or SIGTERM.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <zmq.hpp>

#include "actors/batcher.h"
#include "actors/node_port.h"
#include "actors/submit.h"
#include "apps/chorus/commands.h"
#include "apps/chorus/served.h"
#include "cluster/membership.h"
#include "device/cpu_device.h"
#include "engine/step/engine.h"
#include "gateway/metrics_server.h"
#include "net/codec.h"
#include "net/wire.h"

namespace chorus::app {
namespace {
std::atomic<bool> g_refused{false};

// The node's record for the cluster, or an error when it cannot be described (an endpoint bound to
// every interface, with nothing to advertise).
Result<cluster::NodeRecord> node_record(const NodeArgs& args, const NodePortEndpoints& bound,
                                        const Served* served) {
  cluster::NodeRecord r;
  for (const std::string& l : args.labels) {
    CHORUS_ASSIGN_OR_RETURN(auto kv, cluster::parse_label(l));
    r.labels[kv.first] = kv.second;
  }
  r.endpoint = args.advertise.empty() ? bound.requests : args.advertise;
  if (r.endpoint.find("0.0.0.0") != std::string::npos || r.endpoint.find("//*") != std::string::npos)
    return make_error(Errc::invalid_argument, "the node port is bound to every interface (" + bound.requests +
                                                  "): say where other processes reach it with --advertise");
  r.events = bound.events;
  r.name = args.name.empty() ? default_member_name(r.endpoint.substr(r.endpoint.find_last_of(':') + 1))
                             : args.name;
  if (served) {
    r.pages = args.pages;
    r.host_pages = args.host_pages;
    r.device = served->device->describe();
    r.model = cluster::ModelIdentity::of(*served->model, args.model);
  } else {
    r.actors_only = true;
    r.device = "none (actors only)";
  }
  r.version = CHORUS_VERSION_STRING;
  r.started_ms = wall_clock_ms();
  r.curve_key = bound.curve_key;
  return r;
}

// The port's CURVE keys from --curve-key and --allow-keys: both, or neither.
Status curve_options(const NodeArgs& args, NodePortOptions* po) {
  if (args.curve_key.empty() != args.allow_keys.empty())
    return make_error(Errc::invalid_argument,
                      args.curve_key.empty() ? "--allow-keys needs --curve-key (the node's own key pair)"
                                             : "--curve-key needs --allow-keys (the clients it accepts)");
  if (args.curve_key.empty()) return {};
  CHORUS_ASSIGN_OR_RETURN(po->curve, read_curve_secret(args.curve_key));
  CHORUS_ASSIGN_OR_RETURN(po->allowed, read_allowed_keys(args.allow_keys));
  return {};
}

// The port's options from the command line.
Result<NodePortOptions> port_options(const NodeArgs& args) {
  NodePortOptions po;
  po.endpoint = args.endpoint;
  po.max_frame_bytes = args.max_frame_bytes;
  po.events_endpoint = args.no_model ? "" : args.events_endpoint;
  po.node_name = args.name;
  po.unsafe_tools = args.unsafe_tools;
  if (const char* dir = std::getenv("CHORUS_SANDBOX_DIR")) po.sandbox_base = dir;
  CHORUS_TRY(curve_options(args, &po));
  return po;
}

// With --etcd: the node's membership (null without); an error when it cannot join.
Result<std::unique_ptr<cluster::NodeMembership>> join_cluster(const NodeArgs& args,
                                                              const NodePortEndpoints& bound,
                                                              const Served* served) {
  if (args.etcd.empty()) return std::unique_ptr<cluster::NodeMembership>();
  CHORUS_ASSIGN_OR_RETURN(auto record, node_record(args, bound, served));
  cluster::MembershipOptions mo;
  mo.etcd_url = args.etcd;
  mo.cluster = args.cluster;
  mo.ttl_s = args.lease_ttl_s;
  return cluster::NodeMembership::join(mo, record, [](const Error&) {
    g_refused = true;
    request_stop();
  });
}

void print_started(const NodeArgs& args, const NodePortOptions& po, const cluster::NodeMembership* member) {
  if (member)
    std::printf("chorus node: member `%s` of cluster `%s` (epoch %lld, lease %lld s, etcd at %s)%s\n",
                member->name().c_str(), args.cluster.c_str(), static_cast<long long>(member->epoch()),
                static_cast<long long>(args.lease_ttl_s), args.etcd.c_str(),
                args.labels.empty() ? ""
                                    : (", labels " +
                                       [&] {
                                         std::string l;
                                         for (const auto& x : args.labels) l += (l.empty() ? "" : " ") + x;
                                         return l;
                                       }())
                                          .c_str());
  if (po.curve.secret_key.empty())
    std::printf("chorus node: plaintext on loopback: any process of this machine may use it (--curve-key)\n");
  else
    std::printf("chorus node: CURVE, key %s; %zu client key(s) allowed\n", po.curve.public_key.c_str(),
                po.allowed.size());
}

// `--no-model`: the port, hosting the sinks and tool sandboxes placed here, and no engine.
int run_actors_node(const NodeArgs& args) {
  auto po = port_options(args);
  if (!report("node", po)) return 1;
  zmq::context_t zctx(1);
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 2);
    caf::actor_system sys{cfg};
    caf::actor port;
    auto bound = spawn_node_port(sys, caf::actor(), zctx, *po, &port);
    if (!report("node", bound)) return 1;
    auto member = join_cluster(args, *bound, nullptr);
    if (!report("node", member)) {
      caf::anon_send_exit(port, caf::exit_reason::user_shutdown);
      return 1;
    }
    stop_on_signals();
    std::printf("chorus node: actors only (no model), hosting sinks and tool sandboxes, listening on %s\n",
                bound->requests.c_str());
    print_started(args, *po, member->get());
    std::fflush(stdout);
    wait_for_stop();
    member->reset();  // leaves the cluster first: the coordinator places nothing more here
    caf::anon_send_exit(port, caf::exit_reason::user_shutdown);
  }
  std::printf("chorus node: stopped\n");
  return g_refused ? 1 : 0;
}
}  // namespace

int run_keygen(const KeygenArgs& args) {
  auto keys = make_curve_keys();
  Status written = keys ? write_curve_keys(*keys, args.base, args.force) : Status(keys.error());
  if (!report("keygen", written)) return 1;
  std::printf("chorus keygen: %s.key (secret, mode 0600) and %s.pub (public key %s)\n", args.base.c_str(),
              args.base.c_str(), keys->public_key.c_str());
  return 0;
}

int run_node(const NodeArgs& args) {
  for (const std::string& l : args.labels)
    if (auto kv = cluster::parse_label(l); !report("node", kv)) return 2;
  if (args.no_model) return run_actors_node(args);
  std::shared_ptr<Trace> trace;
  if (!open_trace("node", args.trace, &trace)) return 2;
  auto served = load_served("node", args.model, args.threads, args.pages, args.budget, 0, args.device,
                            args.linear_slots, trace, args.kv_type);
  if (!served) return 1;
  const auto& model = served->model;
  const auto& device = served->device;

  zmq::context_t zctx(1);  // declared before the actor system: destroyed after it
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 2);
    caf::actor_system sys{cfg};
    const std::shared_ptr<const EngineCounters> counters = served->engine->counters();
    caf::actor batcher = spawn_batcher(sys, std::move(served->engine));
    // Scrapes ask the memory actor for the pool's pages in use, as a client's heartbeat does.
    auto metrics = start_metrics(
        "node", args.metrics_host, args.metrics_port, [&sys, batcher, counters, pages = args.pages] {
          caf::scoped_actor self{sys};
          auto r = ask(self, batcher, encode_heartbeat(0, "", 0, 0), std::chrono::seconds(5));
          return engine_metrics_text(*counters, r && r->kind == ReplyKind::heartbeat ? r->pages : -1, pages);
        });
    if (!metrics) {
      caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
      return 1;
    }
    caf::actor port;
    auto po = port_options(args);
    auto bound = po ? spawn_node_port(sys, batcher, zctx, *po, &port) : Result<NodePortEndpoints>(po.error());
    if (!report("node", bound)) {
      caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
      return 1;
    }
    auto joined = join_cluster(args, *bound, served.get());
    if (!report("node", joined)) {
      caf::anon_send_exit(port, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
      return 1;
    }
    std::unique_ptr<cluster::NodeMembership> member = std::move(*joined);
    stop_on_signals();
    std::printf("chorus node: %s, %s, events on %s, listening on %s\n", model->config.name.c_str(),
                device->describe().c_str(), bound->events.empty() ? "(none)" : bound->events.c_str(),
                bound->requests.c_str());
    print_started(args, *po, member.get());
    if (*metrics)
      std::printf("chorus node: metrics on http://%s:%d/metrics\n", args.metrics_host.c_str(),
                  (*metrics)->port());
    std::fflush(stdout);
    wait_for_stop();
    metrics->reset();  // before the actor system it asks goes
    member.reset();    // leaves the cluster first: the coordinator stops sending work
    caf::anon_send_exit(port, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
  }
  write_trace("node", trace, args.trace);
  std::printf("chorus node: stopped\n");
  return g_refused ? 1 : 0;
}

}  // namespace chorus::app
