#include "cluster/membership.h"

#include <spdlog/spdlog.h>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/model/model.h"

namespace chorus::cluster {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Fnv64 {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  template <class T>
  void add_value(const T& v) {
    add(&v, sizeof v);
  }
};

Result<json> parse_object(const std::string& text, const char* what) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return make_error(Errc::bad_format, std::string(what) + " is not a JSON object");
  return j;
}

// Sleeps `s` seconds in short slices; false when `stop` was set meanwhile.
bool nap(double s, const std::atomic<bool>& stop) {
  const auto until = Clock::now() + std::chrono::duration<double>(s);
  while (Clock::now() < until) {
    if (stop.load()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !stop.load();
}

// An integer field of a record, `fallback` when absent; a float or a string is a bad record, not a
// conversion (a float beyond int64's range would be undefined behaviour).
int64_t integer_field(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_number_integer()) throw std::invalid_argument(std::string("`") + key + "` is not an integer");
  return it->get<int64_t>();
}
}  // namespace

ModelIdentity ModelIdentity::of(const Model& model, const std::string& path) {
  ModelIdentity id;
  id.name = model.config.name;
  id.arch = model.config.arch;
  id.file = path.substr(path.find_last_of('/') + 1);
  Fnv64 h;
  h.add_value(model.gguf.file_size());
  for (const auto& t : model.gguf.tensors()) {
    h.add(t.name.data(), t.name.size());
    h.add_value(static_cast<int>(t.type));
    h.add_value(t.ne);
    h.add_value(t.n_bytes);
    if (t.data) h.add(t.data, std::min<size_t>(t.n_bytes, 4096));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.h));
  id.fingerprint = hex;
  return id;
}

std::string ModelIdentity::describe() const {
  return name + " (" + arch + ", " + file + ", " + fingerprint + ")";
}

std::string ModelIdentity::to_json() const {
  return json{{"name", name}, {"arch", arch}, {"file", file}, {"fingerprint", fingerprint}}.dump();
}

Result<ModelIdentity> ModelIdentity::from_json(const std::string& text) {
  CHORUS_ASSIGN_OR_RETURN(json j, parse_object(text, "a model identity"));
  ModelIdentity m;
  try {  // value() throws on a field of another type
    m.name = j.value("name", "");
    m.arch = j.value("arch", "");
    m.file = j.value("file", "");
    m.fingerprint = j.value("fingerprint", "");
  } catch (const json::exception& e) {
    return make_error(Errc::bad_format, std::string("a model identity: ") + e.what());
  }
  if (m.fingerprint.empty()) return make_error(Errc::bad_format, "a model identity without a fingerprint");
  return m;
}

std::string NodeRecord::to_json() const {
  json j{{"name", name},       {"endpoint", endpoint},      {"events", events},
         {"pages", pages},     {"host_pages", host_pages},  {"device", device},
         {"version", version}, {"started_ms", started_ms},  {"curve_key", curve_key},
         {"labels", labels},   {"actors_only", actors_only}};
  if (!actors_only) j["model"] = json::parse(model.to_json());
  return j.dump();
}

bool NodeRecord::has_label(const std::string& key_value) const {
  const size_t eq = key_value.find('=');
  if (eq == std::string::npos) return false;
  auto it = labels.find(key_value.substr(0, eq));
  return it != labels.end() && it->second == key_value.substr(eq + 1);
}

Result<std::pair<std::string, std::string>> parse_label(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || text.find_first_of(" \t\n/") != std::string::npos)
    return make_error(Errc::invalid_argument,
                      "a label is KEY=VALUE without spaces or `/` (e.g. role=edge): `" + text + "`");
  return std::pair{text.substr(0, eq), text.substr(eq + 1)};
}

Result<NodeRecord> NodeRecord::from_json(const std::string& text) {
  CHORUS_ASSIGN_OR_RETURN(json j, parse_object(text, "a node record"));
  NodeRecord r;
  try {
    r.name = j.at("name").get<std::string>();
    r.endpoint = j.at("endpoint").get<std::string>();
    r.events = j.value("events", "");
    r.pages = integer_field(j, "pages", 0);
    r.host_pages = integer_field(j, "host_pages", 0);
    r.device = j.value("device", "");
    r.version = j.value("version", "");
    r.started_ms = integer_field(j, "started_ms", 0);
    r.curve_key = j.value("curve_key", "");
    if (!r.curve_key.empty() && r.curve_key.size() != 40)
      return make_error(Errc::bad_format, "a node record: `curve_key` is not a 40-character Z85 key");
    r.actors_only = j.value("actors_only", false);
    if (j.contains("labels")) {
      if (!j["labels"].is_object())
        return make_error(Errc::bad_format, "a node record: `labels` is not an object");
      for (const auto& [k, v] : j["labels"].items()) {
        if (k.empty() || !v.is_string())
          return make_error(Errc::bad_format,
                            "a node record: a label is a non-empty KEY with a string VALUE");
        r.labels[k] = v.get<std::string>();
      }
    }
    if (!r.actors_only || j.contains("model")) {
      CHORUS_ASSIGN_OR_RETURN(r.model, ModelIdentity::from_json(j.at("model").dump()));
    }
  } catch (const json::exception& e) {
    return make_error(Errc::bad_format, std::string("a node record: ") + e.what());
  } catch (const std::invalid_argument& e) {
    return make_error(Errc::bad_format, std::string("a node record: ") + e.what());
  }
  return r;
}

Result<std::vector<NodeRecord>> list_nodes(EtcdClient& etcd, const ClusterKeys& keys) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<EtcdKv> kvs, etcd.list(keys.nodes()));
  std::vector<NodeRecord> out;
  for (const EtcdKv& kv : kvs) {
    auto r = NodeRecord::from_json(kv.value);
    if (!r) {
      spdlog::warn("cluster: skipping the record at {}: {}", kv.key, r.error().message);
      continue;
    }
    r->lease = kv.lease;
    r->epoch = kv.create_revision;
    out.push_back(std::move(*r));
  }
  return out;
}

NodeMembership::NodeMembership(MembershipOptions opts, std::unique_ptr<EtcdClient> etcd, NodeRecord self)
    : opts_(std::move(opts)), keys_(opts_.cluster), etcd_(std::move(etcd)), self_(std::move(self)) {}

Result<std::unique_ptr<NodeMembership>> NodeMembership::join(const MembershipOptions& opts, NodeRecord self,
                                                             std::function<void(const Error&)> on_refused) {
  if (self.name.empty() || self.name.find('/') != std::string::npos)
    return make_error(Errc::invalid_argument,
                      "a node name must be non-empty and hold no `/`: `" + self.name + "`");
  if (opts.ttl_s < 1) return make_error(Errc::invalid_argument, "the lease TTL must be at least 1 s");
  CHORUS_ASSIGN_OR_RETURN(auto etcd, EtcdClient::open(opts.etcd_url, opts.etcd_timeout_s));
  std::unique_ptr<NodeMembership> m(new NodeMembership(opts, std::move(etcd), std::move(self)));
  CHORUS_TRY(m->enter());
  m->thread_ = std::thread([p = m.get(), f = std::move(on_refused)] { p->keep_alive(f); });
  return m;
}

NodeMembership::~NodeMembership() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (lease_.load() != 0) (void)etcd_->revoke(lease_.load());
}

Status NodeMembership::enter() {
  const std::string where = "cluster `" + opts_.cluster + "` (etcd at " + opts_.etcd_url + ")";
  const double wait_s = opts_.name_wait_s >= 0 ? opts_.name_wait_s : static_cast<double>(opts_.ttl_s) + 1;
  const auto deadline = Clock::now() + std::chrono::duration<double>(wait_s);
  for (;;) {
    CHORUS_ASSIGN_OR_RETURN(auto model_kv, etcd_->get(keys_.model()));
    CHORUS_ASSIGN_OR_RETURN(auto node_kv, etcd_->get(keys_.node(self_.name)));
    if (node_kv) {  // the name is taken: by a predecessor whose lease runs out soon, or by a live node
      if (Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      auto holder = NodeRecord::from_json(node_kv->value);
      return make_error(Errc::invalid_argument, where + " has a live node named `" + self_.name + "`" +
                                                    (holder ? " at " + holder->endpoint : std::string()) +
                                                    ": give this node another --name");
    }
    bool write_model = !model_kv && !self_.actors_only;
    if (model_kv && !self_.actors_only) {  // an actors-only node serves no model: any cluster takes it
      auto theirs = ModelIdentity::from_json(model_kv->value);
      if (!theirs || !theirs->same_model(self_.model)) {
        CHORUS_ASSIGN_OR_RETURN(auto live, list_nodes(*etcd_, keys_));
        if (!live.empty())
          return make_error(
              Errc::invalid_argument,
              where + " serves " + (theirs ? theirs->describe() : std::string("an unreadable model record")) +
                  " (on " + std::to_string(live.size()) + " live node(s), e.g. `" + live.front().name +
                  "`); this node loads " + self_.model.describe() +
                  ": a cluster serves one model — join another cluster (--cluster) or stop its nodes first");
        spdlog::warn("{}: no live node serves {}: the cluster now serves {}", where,
                     theirs ? theirs->describe() : std::string("the recorded model"), self_.model.describe());
        write_model = true;
      }
    }
    // The lease is taken only now: one taken before a wait for the name would have expired.
    CHORUS_ASSIGN_OR_RETURN(const int64_t lease, etcd_->grant(opts_.ttl_s));
    auto give_up = [&](Error e) {
      (void)etcd_->revoke(lease);
      return e;
    };
    std::vector<EtcdCompare> cmp = {{keys_.node(self_.name), 0}};
    if (!self_.actors_only) cmp.push_back({keys_.model(), model_kv ? model_kv->mod_revision : 0});
    std::vector<EtcdPut> puts = {{keys_.node(self_.name), self_.to_json(), lease}};
    if (write_model) puts.push_back({keys_.model(), self_.model.to_json(), 0});
    auto ok = etcd_->txn(cmp, puts);
    if (!ok) return give_up(ok.error());
    if (!*ok) {  // the model or the name changed under us: look again
      (void)etcd_->revoke(lease);
      continue;
    }
    auto mine = etcd_->get(keys_.node(self_.name));
    if (!mine) return give_up(mine.error());
    lease_ = lease;
    epoch_ = *mine ? (*mine)->create_revision : 0;
    ++joins_;
    spdlog::info("{}: node `{}` joined (epoch {}, lease {} of {} s, {})", where, self_.name, epoch_.load(),
                 lease, opts_.ttl_s, self_.endpoint);
    return {};
  }
}

void NodeMembership::keep_alive(std::function<void(const Error&)> on_refused) {
  const double period = std::max(0.2, static_cast<double>(opts_.ttl_s) / 3);
  bool warned = false;
  while (nap(period, stop_)) {
    if (lease_.load() != 0) {
      auto ttl = etcd_->keepalive(lease_.load());
      if (!ttl) {
        if (!warned)
          spdlog::warn("cluster: cannot renew node `{}`'s lease: {}", self_.name, ttl.error().message);
        warned = true;
        continue;
      }
      warned = false;
      if (*ttl > 0) continue;
      spdlog::warn(
          "cluster: node `{}` lost its lease (epoch {}): it was out of reach for more than {} s; joining "
          "again "
          "as a new member",
          self_.name, epoch_.load(), opts_.ttl_s);
      lease_ = 0;
    }
    Status s = enter();
    if (s.ok()) continue;
    if (s.error().code == Errc::invalid_argument) {
      spdlog::error("cluster: node `{}` cannot join again: {}", self_.name, s.error().message);
      if (on_refused) on_refused(s.error());
      return;
    }
    spdlog::warn("cluster: node `{}` cannot join again yet: {}", self_.name, s.error().message);
  }
}

}  // namespace chorus::cluster
