#include "cluster/election.h"

#include <spdlog/spdlog.h>
#include <chrono>
#include <nlohmann/json.hpp>

namespace chorus::cluster {
namespace {

using json = nlohmann::json;

Result<LeaderRecord> leader_of(const EtcdKv& kv) {
  json j = json::parse(kv.value, nullptr, false);
  if (!j.is_object() || !j.contains("name"))
    return make_error(Errc::bad_format, "the leader record is not a JSON object with a name");
  LeaderRecord r;
  try {  // value() throws on a field of another type
    r.name = j.value("name", "");
    r.http = j.value("http", "");
  } catch (const json::exception& e) {
    return make_error(Errc::bad_format, std::string("the leader record: ") + e.what());
  }
  r.term = kv.create_revision;
  r.lease = kv.lease;
  return r;
}

}  // namespace

Election::Election(MembershipOptions opts, std::unique_ptr<EtcdClient> etcd, std::string name,
                   std::string http, std::function<void(bool, int64_t)> on_change)
    : opts_(std::move(opts)),
      keys_(opts_.cluster),
      etcd_(std::move(etcd)),
      name_(std::move(name)),
      http_(std::move(http)),
      on_change_(std::move(on_change)) {}

Result<std::unique_ptr<Election>> Election::stand(const MembershipOptions& opts, std::string name,
                                                  std::string http,
                                                  std::function<void(bool, int64_t)> on_change) {
  if (opts.ttl_s < 1) return make_error(Errc::invalid_argument, "the lease TTL must be at least 1 s");
  CHORUS_ASSIGN_OR_RETURN(auto etcd, EtcdClient::open(opts.etcd_url, opts.etcd_timeout_s));
  std::unique_ptr<Election> e(
      new Election(opts, std::move(etcd), std::move(name), std::move(http), std::move(on_change)));
  CHORUS_ASSIGN_OR_RETURN(e->lease_, e->etcd_->grant(opts.ttl_s));  // etcd is reachable, or we say so now
  e->try_lead();
  e->thread_ = std::thread([p = e.get()] { p->run(); });
  return e;
}

Election::~Election() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (lease_ != 0) (void)etcd_->revoke(lease_);
}

Result<std::optional<LeaderRecord>> Election::current() {
  CHORUS_ASSIGN_OR_RETURN(auto kv, etcd_->get(keys_.leader()));
  if (!kv) return std::optional<LeaderRecord>();
  CHORUS_ASSIGN_OR_RETURN(LeaderRecord r, leader_of(*kv));
  return std::optional<LeaderRecord>(std::move(r));
}

void Election::try_lead() {
  const std::string value = json{{"name", name_}, {"http", http_}}.dump();
  auto won = etcd_->create(keys_.leader(), value, lease_);
  if (!won || !*won) return;
  auto kv = etcd_->get(keys_.leader());
  if (!kv || !*kv || (*kv)->lease != lease_) return;
  term_ = (*kv)->create_revision;
  spdlog::info("cluster `{}`: coordinator `{}` leads (term {})", opts_.cluster, name_, term_.load());
  if (on_change_) on_change_(true, term_.load());
}

void Election::run() {
  const auto period = std::chrono::duration<double>(std::max(0.2, static_cast<double>(opts_.ttl_s) / 3));
  bool warned = false;
  for (auto next = std::chrono::steady_clock::now() + period; !stop_.load();) {
    if (std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    next = std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
    auto ttl = lease_ != 0 ? etcd_->keepalive(lease_) : Result<int64_t>(int64_t{0});
    if (!ttl) {
      if (!warned)
        spdlog::warn("cluster: coordinator `{}` cannot renew its lease: {}", name_, ttl.error().message);
      warned = true;
      continue;
    }
    warned = false;
    if (*ttl == 0) {  // the lease is gone: whatever this candidate held, it holds no more
      if (term_.exchange(0) != 0) {
        spdlog::warn("cluster `{}`: coordinator `{}` lost its lease: it steps down", opts_.cluster, name_);
        if (on_change_) on_change_(false, 0);
      }
      auto lease = etcd_->grant(opts_.ttl_s);
      lease_ = lease ? *lease : 0;
      continue;  // stands again from the next period on: a standby has had its chance first
    }
    if (term_.load() == 0) try_lead();
  }
}

}  // namespace chorus::cluster
