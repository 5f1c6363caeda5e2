#include "cluster/coordinator.h"

#include <spdlog/spdlog.h>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <zmq.hpp>

#include "actors/actor_placement.h"
#include "actors/atoms.h"
#include "cluster/election.h"
#include "cluster/node_link.h"
#include "engine/model/model.h"
#include "engine/step/trace.h"
#include "gateway/gateway.h"
#include "net/wire.h"

namespace chorus::cluster {
using json = nlohmann::json;

struct Coordinator::Impl {
  caf::actor_system* sys = nullptr;
  CoordinatorOptions opts;
  ClusterKeys keys{"default"};
  std::unique_ptr<EtcdClient> etcd;
  std::unique_ptr<Election> election;
  zmq::context_t zctx{1};

  std::unique_ptr<Model> model;  // its tokenizer and chat template (the weights are not read)
  ModelIdentity identity;
  std::unique_ptr<Gateway> gateway;  // the OpenAI API, GET /cluster, /metrics

  struct Member {
    NodeRecord record;
    caf::actor link;
    std::shared_ptr<NodeHealth> health;
    int64_t linked_ms = 0;  // when its link was made
    bool fenced = false;
    bool serving = false;  // a backend of the gateway
    bool warned = false;   // of another model
  };
  mutable std::mutex mu;
  std::map<std::string, Member> members;      // by node name
  std::map<std::string, std::string> hosted;  // "PROGRAM/ACTOR" -> the node that hosts it (placed actors)

  std::thread poller;
  std::atomic<bool> stopping{false};
  std::atomic<bool> ready{false};  // `election` is set (the HTTP routes run from the start)
  int port = 0;

  ~Impl() {
    stopping = true;
    if (poller.joinable()) poller.join();
    if (gateway) gateway->stop();  // requests in flight end, the programs are released
    std::lock_guard lock(mu);
    for (auto& [name, m] : members)
      if (m.link) caf::anon_send(m.link, stop_atom::value);
    members.clear();
    election.reset();  // resigns: a standby takes over at once
  }

  // A member that cannot be linked (no CURVE key here for a node that asks for one, a bad
  // endpoint) is kept, unlinked and never fenced, so that it is reported once and not retried
  // at every poll; it is linked when its record changes (it joins again).
  void link(const NodeRecord& r) {
    Member m;
    m.record = r;
    m.health = std::make_shared<NodeHealth>();
    m.linked_ms = wall_clock_ms();
    NodeLinkOptions lo;
    lo.name = r.name;
    lo.endpoint = r.endpoint;
    lo.heartbeat_s = opts.heartbeat_s;
    lo.dead_after_s = opts.dead_after_s;
    if (!r.curve_key.empty()) {
      lo.server_key = r.curve_key;
      lo.curve = opts.curve;
    }
    auto l =
        r.curve_key.empty() || !opts.curve.secret_key.empty()
            ? spawn_node_link(*sys, zctx, lo, m.health)
            : Result<caf::actor>(make_error(Errc::invalid_argument,
                                            "it asks for CURVE (its key " + r.curve_key +
                                                "): start the coordinator with --curve-key, and allow that "
                                                "key's .pub on the node"));
    if (l) {
      m.link = *l;
    } else {
      spdlog::warn("cluster `{}`: node `{}` (epoch {}) not linked: {}", opts.membership.cluster, r.name,
                   r.epoch, l.error().message);
      mark("not linked", r.name, r.epoch);
      m.fenced = true;  // nothing to hear from it: not a silent node
    }
    members[r.name] = std::move(m);
  }

  // A change of the membership as an instant of the trace's cluster process (lane 0).
  void mark(const std::string& what, const std::string& node, int64_t epoch) const {
    const auto& t = opts.gateway.trace;
    if (!t) return;
    t->name_lane(Trace::kClusterPid, 0, "membership");
    t->instant("membership", what + " " + node, Trace::kClusterPid, 0, t->now_us(),
               "{\"node\":" + Trace::quote(node) + ",\"epoch\":" + std::to_string(epoch) + "}");
  }

  void unlink(const std::string& name) {
    auto it = members.find(name);
    if (it == members.end()) return;
    if (it->second.serving) gateway->remove_backend(name);  // before the link goes: it releases there
    if (it->second.link) caf::anon_send(it->second.link, stop_atom::value);
    members.erase(it);
  }

  // The leader serves on every node that is up and runs its model; a standby on none, and says
  // where the leader is.
  void serve_members(bool leading) {
    for (auto& [name, m] : members) {
      if (!leading && m.serving) {
        gateway->remove_backend(name);
        m.serving = false;
      }
      if (!leading || m.serving || !m.health->up.load() || m.record.actors_only) continue;
      if (!m.record.model.same_model(identity)) {
        if (!m.warned)
          spdlog::warn("cluster `{}`: node `{}` runs {}, this coordinator {}: not served",
                       opts.membership.cluster, name, m.record.model.describe(), identity.describe());
        m.warned = true;
        continue;
      }
      auto health = m.health;
      gateway->add_backend(
          name, m.link, m.record.pages,
          [health] { return health->pages_total.load() - health->pages_used.load(); }, m.record.host_pages,
          [health] { return health->up.load(); });
      m.serving = true;
      spdlog::info("cluster `{}`: serving on node `{}` ({} KV pages, {} host pages)", opts.membership.cluster,
                   name, m.record.pages, m.record.host_pages);
      mark("serving on", name, m.record.epoch);
    }
    std::string why;
    if (!leading) {
      auto l = election->current();
      why = "coordinator `" + opts.name + "` stands by" +
            (l && *l ? ": the leader is `" + (*l)->name + "` at " + (*l)->http
                     : std::string(": no leader yet"));
    }
    gateway->set_unavailable(why);
  }

  // One look at etcd: who joined, who left, who came back as a new member, who must be fenced.
  void poll_once(bool& warned) {
    auto records = list_nodes(*etcd, keys);
    if (!records) {
      if (!warned)
        spdlog::warn("cluster `{}`: cannot read the membership: {}", opts.membership.cluster,
                     records.error().message);
      warned = true;
      return;
    }
    warned = false;
    std::lock_guard lock(mu);
    std::map<std::string, const NodeRecord*> live;
    for (const NodeRecord& r : *records) live[r.name] = &r;
    for (auto it = members.begin(); it != members.end();) {
      const auto l = live.find(it->first);
      if (l != live.end() && l->second->epoch == it->second.record.epoch) {
        ++it;
        continue;
      }
      if (l == live.end()) {
        spdlog::warn("cluster `{}`: node `{}` (epoch {}) left: its lease ended", opts.membership.cluster,
                     it->first, it->second.record.epoch);
        mark("left", it->first, it->second.record.epoch);
      } else {
        spdlog::info("cluster `{}`: node `{}` joined again: epoch {} replaces {}", opts.membership.cluster,
                     it->first, l->second->epoch, it->second.record.epoch);
        mark("joined again", it->first, l->second->epoch);
      }
      const std::string name = it->first;
      ++it;
      unlink(name);
    }
    for (const NodeRecord& r : *records) {
      if (members.count(r.name)) continue;
      if (r.actors_only)
        spdlog::info("cluster `{}`: node `{}` joined (epoch {}, {}, actors only{})", opts.membership.cluster,
                     r.name, r.epoch, r.endpoint, labels_of(r).empty() ? "" : ", labels " + labels_of(r));
      else
        spdlog::info("cluster `{}`: node `{}` joined (epoch {}, {}, {} KV pages, {}{})",
                     opts.membership.cluster, r.name, r.epoch, r.endpoint, r.pages, r.model.describe(),
                     labels_of(r).empty() ? "" : ", labels " + labels_of(r));
      mark("joined", r.name, r.epoch);
      link(r);
    }
    const bool leading = election && election->leader();
    serve_members(leading);
    if (!leading) return;
    const int64_t now = wall_clock_ms();
    for (auto& [name, m] : members) {
      const int64_t heard = std::max(m.health->last_ms.load(), m.linked_ms);
      if (m.fenced || now - heard <= static_cast<int64_t>(opts.dead_after_s * 1000)) continue;
      m.fenced = true;
      Status s = etcd->revoke(m.record.lease);
      spdlog::warn("cluster `{}`: fenced node `{}` (epoch {}): no heartbeat for {:.1f} s{}",
                   opts.membership.cluster, name, m.record.epoch, static_cast<double>(now - heard) / 1000,
                   s.ok() ? ": its lease is revoked" : ": cannot revoke its lease: " + s.error().message);
      mark("fenced", name, m.record.epoch);
    }
  }

  void poll_loop() {
    bool warned = false;
    while (!stopping.load()) {
      poll_once(warned);
      for (auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts.poll_s);
           !stopping.load() && std::chrono::steady_clock::now() < until;)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::vector<NodeView> views() const {
    std::lock_guard lock(mu);
    std::vector<NodeView> out;
    for (const auto& [name, m] : members) {
      NodeView v;
      v.record = m.record;
      v.up = m.health->up.load();
      v.rtt_us = m.health->rtt_us.load();
      v.pages_used = m.health->pages_used.load();
      v.pages_total = m.health->pages_total.load();
      v.in_flight = m.health->in_flight.load();
      out.push_back(std::move(v));
    }
    return out;
  }

  json to_json() const {
    if (!ready.load()) return {{"cluster", opts.membership.cluster}, {"starting", true}};
    json nodes = json::array();
    const auto census = gateway->census();  // the programs of the nodes this coordinator serves on
    int64_t waiting = 0;
    for (const auto& [name, c] : census) waiting += c.waiting;
    for (const NodeView& v : views()) {
      const auto c = census.find(v.record.name);
      nodes.push_back(
          {{"name", v.record.name},
           {"endpoint", v.record.endpoint},
           {"curve_key", v.record.curve_key},
           {"events", v.record.events},
           {"epoch", v.record.epoch},
           {"lease", std::to_string(v.record.lease)},
           {"up", v.up},
           {"rtt_us", v.rtt_us},
           {"pages_used", v.pages_used},
           {"pages_total", v.pages_total},
           {"in_flight", v.in_flight},
           {"device", v.record.device},
           {"model", v.record.actors_only ? json(nullptr) : json::parse(v.record.model.to_json())},
           {"labels", v.record.labels},
           {"actors_only", v.record.actors_only},
           {"hosts", hosts_on(v.record.name)},
           {"version", v.record.version},
           {"programs", c == census.end() ? json(nullptr)
                                          : json{{"resident", c->second.resident},
                                                 {"paused", c->second.paused},
                                                 {"waiting", c->second.waiting}}}});
    }
    json leader = nullptr;
    if (election)
      if (auto l = election->current(); l && *l)
        leader = {{"name", (*l)->name}, {"http", (*l)->http}, {"term", (*l)->term}};
    return {{"cluster", opts.membership.cluster},
            {"etcd", opts.membership.etcd_url},
            {"coordinator",
             {{"name", opts.name},
              {"leader", election && election->leader()},
              {"term", election ? election->term() : 0}}},
            {"leader", leader},
            {"waiting", waiting},
            {"nodes", nodes}};
  }

  static std::string labels_of(const NodeRecord& r) {
    std::string s;
    for (const auto& [k, v] : r.labels) s += (s.empty() ? "" : " ") + k + "=" + v;
    return s;
  }

  json hosts_on(const std::string& node) const {
    std::lock_guard lock(mu);
    json out = json::array();
    for (const auto& [what, where] : hosted)
      if (where == node) out.push_back(what);
    return out;
  }

  static bool satisfies(const NodeRecord& r, const topology::Placement& where) {
    return where.node.empty() ? r.has_label(where.label) : r.name == where.node;
  }

  // ActorPlacement::find over the members: one that is up, not fenced, satisfies `where`.
  Result<PlacedNode> find(const topology::Placement& where, const std::string& avoid, double wait_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    for (;;) {
      std::string seen;
      {
        std::lock_guard lock(mu);
        for (const auto& [name, m] : members) {
          if (!satisfies(m.record, where)) continue;
          if (m.link && !m.fenced && m.health->up.load() && name != avoid) return PlacedNode{name, m.link};
          seen += (seen.empty() ? "" : ", ") + name + " (down)";
        }
      }
      if (std::chrono::steady_clock::now() >= until || stopping.load())
        return make_error(
            Errc::not_found,
            (where.node.empty() ? "no live node is labelled " + where.label
                                : "node `" + where.node + "` is not live") +
                " (waited " + std::to_string(static_cast<int>(wait_s + 0.5)) + " s; " +
                (seen.empty() ? std::string("no member satisfies it") : "members that do: " + seen) + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  std::string metrics() const {
    if (!ready.load()) return "";
    const auto v = views();
    size_t up = 0;
    for (const NodeView& n : v) up += n.up;
    std::string out;
    auto line = [&](const std::string& s) { out += s + "\n"; };
    line("# TYPE chorus_cluster_nodes gauge");
    line("chorus_cluster_nodes " + std::to_string(v.size()));
    line("# TYPE chorus_cluster_nodes_up gauge");
    line("chorus_cluster_nodes_up " + std::to_string(up));
    line("# TYPE chorus_cluster_leader gauge");
    line(std::string("chorus_cluster_leader ") + (election && election->leader() ? "1" : "0"));
    line("# TYPE chorus_cluster_term gauge");
    line("chorus_cluster_term " + std::to_string(election ? election->term() : 0));
    const char* per_node[] = {"up", "pages_used", "pages_total", "rtt_seconds"};
    for (const char* m : per_node) {
      line(std::string("# TYPE chorus_cluster_node_") + m + " gauge");
      for (const NodeView& n : v) {
        const double x = std::string(m) == "up"            ? (n.up ? 1.0 : 0.0)
                         : std::string(m) == "pages_used"  ? static_cast<double>(n.pages_used)
                         : std::string(m) == "pages_total" ? static_cast<double>(n.pages_total)
                                                           : static_cast<double>(n.rtt_us) / 1e6;
        line(std::string("chorus_cluster_node_") + m + "{node=\"" + n.record.name + "\"} " +
             std::to_string(x));
      }
    }
    return out;
  }
};

namespace {

// The coordinator's nodes as the places a program's actors may run (actors/actor_placement.h).
class ClusterPlacement : public ActorPlacement {
 public:
  using Find = std::function<Result<PlacedNode>(const topology::Placement&, const std::string&, double)>;
  using Hosting = std::function<void(const std::string&, const std::string&, const std::string&)>;
  ClusterPlacement(Find find, Hosting hosting, double wait_s)
      : find_(std::move(find)), hosting_(std::move(hosting)), wait_s_(wait_s) {}
  Result<PlacedNode> find(const topology::Placement& where, const std::string& avoid,
                          double wait_s) override {
    return find_(where, avoid, wait_s);
  }
  void hosting(const std::string& program, const std::string& actor, const std::string& node) override {
    hosting_(program, actor, node);
  }
  double wait_s() const override { return wait_s_; }

 private:
  Find find_;  // the coordinator's: it outlives every program (its gateway stops first)
  Hosting hosting_;
  double wait_s_;
};

}  // namespace

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Coordinator::~Coordinator() {
  stop();
}

Result<std::unique_ptr<Coordinator>> Coordinator::start(caf::actor_system& sys, CoordinatorOptions opts) {
  if (!(opts.poll_s > 0))
    return make_error(Errc::invalid_argument, "the membership poll period must be positive");
  if (!(opts.heartbeat_s > 0) || !(opts.dead_after_s > opts.heartbeat_s))
    return make_error(Errc::invalid_argument, "--dead-after must be longer than --heartbeat (both positive)");
  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  impl->keys = ClusterKeys(opts.membership.cluster);
  impl->opts = opts;
  CHORUS_ASSIGN_OR_RETURN(impl->etcd,
                          EtcdClient::open(opts.membership.etcd_url, opts.membership.etcd_timeout_s));
  CHORUS_ASSIGN_OR_RETURN(impl->model, Model::load(opts.model_path));
  impl->identity = ModelIdentity::of(*impl->model, opts.model_path);
  // The cluster's model, if it has one, must be this one.
  CHORUS_ASSIGN_OR_RETURN(auto recorded, impl->etcd->get(impl->keys.model()));
  if (recorded) {
    auto theirs = ModelIdentity::from_json(recorded->value);
    if (theirs && !theirs->same_model(impl->identity))
      return make_error(Errc::invalid_argument, "cluster `" + opts.membership.cluster + "` serves " +
                                                    theirs->describe() + "; this coordinator loads " +
                                                    impl->identity.describe() +
                                                    ": give it the cluster's --model");
  }
  Impl* p = impl.get();
  GatewayOptions go = opts.gateway;
  go.host = opts.host;
  go.port = opts.port;
  go.routes.push_back({"/cluster", "application/json", [p] { return p->to_json().dump(2); }});
  go.more_metrics = [p] { return p->metrics(); };
  go.placement = std::make_shared<ClusterPlacement>(
      [p](const topology::Placement& where, const std::string& avoid, double wait_s) {
        return p->find(where, avoid, wait_s);
      },
      [p](const std::string& program, const std::string& actor, const std::string& node) {
        std::lock_guard lock(p->mu);
        if (node.empty())
          p->hosted.erase(program + "/" + actor);
        else
          p->hosted[program + "/" + actor] = node;
      },
      opts.placement_wait_s);
  CHORUS_ASSIGN_OR_RETURN(impl->gateway, Gateway::start_empty(sys, *impl->model, std::move(go)));
  impl->port = impl->gateway->port();
  impl->gateway->set_unavailable("coordinator `" + opts.name + "` is starting");
  const std::string http = "http://" + opts.host + ":" + std::to_string(impl->port);
  CHORUS_ASSIGN_OR_RETURN(impl->election, Election::stand(opts.membership, opts.name, http));
  p->ready = true;
  p->poller = std::thread([p] { p->poll_loop(); });
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

int Coordinator::port() const {
  return impl_ ? impl_->port : 0;
}
bool Coordinator::leader() const {
  return impl_ && impl_->election && impl_->election->leader();
}
int64_t Coordinator::term() const {
  return impl_ && impl_->election ? impl_->election->term() : 0;
}
std::vector<NodeView> Coordinator::nodes() const {
  return impl_ ? impl_->views() : std::vector<NodeView>{};
}
std::string Coordinator::cluster_json() const {
  return impl_ ? impl_->to_json().dump(2) : "{}";
}
void Coordinator::stop() {
  impl_.reset();
}

}  // namespace chorus::cluster
