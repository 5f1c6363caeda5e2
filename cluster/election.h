// Leader election among coordinators, on etcd: the leader is whoever holds the cluster's `leader`
// key (cluster/membership.h), created only where it does not exist and attached to the holder's
// lease. A standby tries to create it every ttl/3; when the leader dies or hangs past its TTL,
// etcd deletes the key with the lease and the first standby to try takes over. A leader that
// finds its lease expired (it was stopped, or cut off from etcd) steps down at once — before it
// can act on a cluster someone else may be leading — and stands again as a standby.
//
// The leader's **term** is the leader key's create_revision: it grows with each new leader, so a
// node can refuse orders from an older term (fencing).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "cluster/etcd.h"
#include "cluster/membership.h"

namespace chorus::cluster {

struct LeaderRecord {
  std::string name;
  std::string http;  // where the leader serves (http://HOST:PORT)
  int64_t term = 0;  // the key's create_revision
  int64_t lease = 0;
};

class Election {
 public:
  // Stands for leader as `name` (announcing `http`); `on_change(leader, term)` is called from the
  // election's thread each time this candidate becomes leader or steps down.
  static Result<std::unique_ptr<Election>> stand(const MembershipOptions& opts, std::string name,
                                                 std::string http,
                                                 std::function<void(bool, int64_t)> on_change = {});
  ~Election();  // resigns: revokes the lease, so a standby takes over without waiting for the TTL

  bool leader() const { return term_.load() != 0; }
  int64_t term() const { return term_.load(); }  // 0 while a standby
  // The current leader as etcd has it (nullopt: none right now).
  Result<std::optional<LeaderRecord>> current();

 private:
  Election(MembershipOptions opts, std::unique_ptr<EtcdClient> etcd, std::string name, std::string http,
           std::function<void(bool, int64_t)> on_change);
  void run();
  void try_lead();

  MembershipOptions opts_;
  ClusterKeys keys_;
  std::unique_ptr<EtcdClient> etcd_;
  std::string name_, http_;
  std::function<void(bool, int64_t)> on_change_;
  int64_t lease_ = 0;  // the election thread's
  std::atomic<int64_t> term_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace chorus::cluster
