// Cluster membership on etcd: who the nodes are, what model they serve, and how long each may be
// believed without news.
//
// Keys, under /chorus/<cluster>/ (docs/cluster.md):
//   model         ModelIdentity JSON: the one model the cluster serves (no lease: it outlives its
//                 nodes; replaced only when a node of another model joins a cluster with no
//                 live node)
//   nodes/<name>  NodeRecord JSON, attached to the node's lease
//   leader        the leading coordinator (cluster/election.h), attached to its lease
//
// A node's membership is its lease: while the node keeps it alive (every ttl/3) its record
// stands; a node that dies or hangs past the TTL loses it and etcd deletes the record. The
// record's create_revision is the member's **epoch**: a node that comes back — or wakes up after
// its lease expired — joins again as a new member with a larger epoch, so whoever acts on a
// member (the coordinator) can tell a stale one from the live one (fencing).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "cluster/etcd.h"

namespace chorus {
struct Model;
}

namespace chorus::cluster {

// What a node serves, to tell two models apart without reading their weights: architecture, name,
// shape, and a hash over the file size, the tensor directory and the first 4 KiB of every tensor
// (two files that differ in any tensor's type, shape or leading values differ).
struct ModelIdentity {
  std::string name;
  std::string arch;
  std::string file;         // the file name (for messages; not compared)
  std::string fingerprint;  // 16 hex digits

  static ModelIdentity of(const Model& model, const std::string& path);
  bool same_model(const ModelIdentity& o) const { return fingerprint == o.fingerprint; }
  std::string describe() const;  // "SmolLM2-135M-Instruct (llama, SmolLM2-135M-Instruct.Q4_1.gguf, 3f...)"
  std::string to_json() const;
  static Result<ModelIdentity> from_json(const std::string& text);
};

struct NodeRecord {
  std::string name;
  std::string endpoint;  // the node port (ROUTER), as the coordinator connects to it
  std::string events;    // its PUB socket ("" none)
  int64_t pages = 0;     // KV pages
  int64_t host_pages = 0;
  std::string device;  // "cpu (2 threads, avx512)", ...
  ModelIdentity model;
  std::string version;     // chorus's
  int64_t started_ms = 0;  // unix ms when the process started
  std::string curve_key;   // the node port's CURVE public key (z85; "" : plaintext, loopback)
  // `chorus node --label KEY=VALUE`: what topologies place actors by (`node: {label: KEY=VALUE}`).
  std::map<std::string, std::string> labels;
  // `--no-model`: it hosts actors (sinks, tool sandboxes) and no engine; `model` is empty, and
  // the cluster's one-model rule does not apply to it.
  bool actors_only = false;
  // From etcd, when read back:
  int64_t lease = 0;
  int64_t epoch = 0;  // the record's create_revision

  std::string to_json() const;
  static Result<NodeRecord> from_json(const std::string& text);
  bool has_label(const std::string& key_value) const;  // "KEY=VALUE"
};

// Parses `KEY=VALUE` (a label as `--label` and topologies write it): an error naming `text` when
// it is not one (no `=`, an empty key, a space).
Result<std::pair<std::string, std::string>> parse_label(const std::string& text);

struct MembershipOptions {
  std::string etcd_url = "http://127.0.0.1:2379";
  std::string cluster = "default";
  int64_t ttl_s = 3;  // lease TTL: a silent member is gone after this long
  double etcd_timeout_s = 2;
  // join(): how long a name held by another lease may be waited for (a predecessor killed a
  // moment ago still holds it until its lease expires). Negative: ttl_s + 1.
  double name_wait_s = -1;
};

// The key layout.
struct ClusterKeys {
  std::string root;  // "/chorus/<cluster>/"
  explicit ClusterKeys(const std::string& cluster) : root("/chorus/" + cluster + "/") {}
  std::string model() const { return root + "model"; }
  std::string nodes() const { return root + "nodes/"; }
  std::string node(const std::string& name) const { return nodes() + name; }
  std::string leader() const { return root + "leader"; }
};

// The live nodes, in name order (records that do not parse are skipped with a warning).
Result<std::vector<NodeRecord>> list_nodes(EtcdClient& etcd, const ClusterKeys& keys);

// A node's membership: its lease, its record, and a thread that keeps them alive.
class NodeMembership {
 public:
  // Joins the cluster as `self`: refused (Errc::invalid_argument) when the cluster serves another
  // model and has live nodes, or when another live member holds the name past name_wait_s. Then
  // keeps the lease alive; when the lease was lost all the same (the process was stopped, etcd was
  // out of reach past the TTL), logs it and joins again as a new member (a new epoch); if that is
  // refused, calls `on_refused` (from its thread) and stops.
  static Result<std::unique_ptr<NodeMembership>> join(const MembershipOptions& opts, NodeRecord self,
                                                      std::function<void(const Error&)> on_refused = {});
  ~NodeMembership();  // leaves: revokes the lease, so the record goes at once

  const std::string& name() const { return self_.name; }
  int64_t epoch() const { return epoch_.load(); }
  int64_t lease() const { return lease_.load(); }
  int joins() const { return joins_.load(); }  // 1 + the times it joined again

 private:
  NodeMembership(MembershipOptions opts, std::unique_ptr<EtcdClient> etcd, NodeRecord self);
  Status enter();  // one join: model check, name, lease, record
  void keep_alive(std::function<void(const Error&)> on_refused);

  MembershipOptions opts_;
  ClusterKeys keys_;
  std::unique_ptr<EtcdClient> etcd_;
  NodeRecord self_;
  std::atomic<int64_t> lease_{0}, epoch_{0};
  std::atomic<int> joins_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace chorus::cluster
