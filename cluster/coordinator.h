// The coordinator of a cluster: stands for leader (cluster/election.h), follows the membership in
// etcd (cluster/membership.h), keeps a link to every live node (cluster/node_link.h), and serves
// the OpenAI-compatible API of `chorus serve` (gateway/gateway.h) over the nodes: while it leads,
// each node that is up and runs its model is a backend, and each program is placed on the node
// with the most free KV pages and stays there while that node is a member; a program whose node
// left starts again on another at its next request (from the client's history). A standby
// answers chat completions with 503 `not_leader`, naming the leader.
//
//   GET /cluster   JSON: this coordinator (name, leader or standby, term), the leader, and each
//                  node: name, endpoint, CURVE key ("" : plaintext), epoch, lease, up (its link's heartbeat),
//                  round trip, KV pages used and total, model, device, labels, whether it hosts
//                  actors only, and the programs' actors placed on it ("PROGRAM/ACTOR")
//   GET /metrics   Prometheus text: chorus_cluster_nodes, _nodes_up, _leader, _term, and per node
//                  chorus_cluster_node_pages_used / _total / _up / _rtt_seconds
//   /v1/chat/completions, /v1/models, /programs (each with its `node`), /programs/release, /health:
//                  as `chorus serve`; /metrics has the programs' series with a `node` label too
//
// Membership is read from etcd every `poll_s`. A new record (or a record with a new epoch: the
// node joined again) gets a new link; a record that went (its lease expired) loses its link. The
// leader also **fences** a node whose link has been down while its lease still stands: it revokes
// that lease, so the node is removed at once rather than after its TTL, and the node — if it is
// alive after all — finds its lease gone and joins again as a new member (a new epoch).
// Each join, departure, replacement and fencing is one log line. A node that registered a CURVE
// key is linked over CURVE with this coordinator's key pair (CoordinatorOptions::curve); without
// one here, it is reported once and not linked.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/membership.h"
#include "gateway/gateway.h"
#include "net/curve.h"

namespace caf {
class actor_system;
}

namespace chorus::cluster {

struct CoordinatorOptions {
  MembershipOptions membership;  // etcd, cluster, lease TTL
  std::string model_path;        // the cluster's model: its tokenizer and chat template
  GatewayOptions gateway;        // the OpenAI API's (host and port: below)
  std::string name = "coordinator";
  std::string host = "127.0.0.1";
  int port = 8100;  // 0: any free port
  double poll_s = 0.5;
  double heartbeat_s = 0.5;   // node links (cluster/node_link.h)
  double dead_after_s = 2.0;  // ... a node silent this long is down, and the leader fences it
  CurveKeys curve;            // this coordinator's key pair, for nodes with a CURVE key (net/curve.h)
  // Placed actors (docs/cluster.md, "Placing actors"): how long a `node:` placement waits for a
  // live node that satisfies it, at a program's start and after its node was lost.
  double placement_wait_s = 30;
};

// One node as the coordinator sees it.
struct NodeView {
  NodeRecord record;
  bool up = false;
  int64_t rtt_us = 0;
  int64_t pages_used = 0, pages_total = 0;
  int64_t in_flight = 0;
};

class Coordinator {
 public:
  static Result<std::unique_ptr<Coordinator>> start(caf::actor_system& sys, CoordinatorOptions opts);
  ~Coordinator();  // stop()

  int port() const;
  bool leader() const;
  int64_t term() const;
  std::vector<NodeView> nodes() const;
  std::string cluster_json() const;  // what GET /cluster answers
  void stop();

 private:
  struct Impl;
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::cluster
