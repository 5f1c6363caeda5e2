#include "gateway/gateway_backends.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/step/trace.h"
#include "gateway/metrics_server.h"
#include "gateway/openai_request.h"

namespace chorus {

using json = nlohmann::json;

namespace {

// The node's own word (its last heartbeat: it also counts what others run there), but no more
// than what its programs here leave (a heartbeat lags the programs just placed, and a paused
// program will want its pages back).
int64_t room_of(const GatewayBackend& b) {
  return b.room ? std::min(b.room(), b.programs->capacity_pages() - b.programs->demand_pages()) : 0;
}

// Whether nothing more goes to `b`: its node was lost, or its link found it down. A node found
// down is fenced (its lease revoked) and can only come back as a new member, with a backend of
// its own; until its record goes, it is no place for a request (found by a partition test on
// separate hosts: a turn sent in that window failed with 500 instead of going on elsewhere).
bool gone(const GatewayBackend& b) {
  return b.lost || (b.up && !b.up());
}

}  // namespace

std::shared_ptr<GatewayBackend> GatewayBackends::place(const std::string& program_id,
                                                       const std::string& avoid) {
  std::lock_guard l(m_);
  if (auto it = placed_.find(program_id); !program_id.empty() && it != placed_.end()) {
    auto b = backends_.find(it->second->name);
    if (b != backends_.end() && b->second == it->second && !gone(*it->second) && it->second->name != avoid)
      return it->second;
    if (it->second->name != avoid) {
      spdlog::warn("gateway: program `{}` was on `{}`, which is gone: it starts again elsewhere", program_id,
                   it->second->name);
      mark("node gone", program_id, it->second->name, -1);
    }
    placed_.erase(it);
  }
  std::map<std::string, int64_t> count;
  for (const auto& [id, b] : placed_) ++count[b->name];
  std::shared_ptr<GatewayBackend> best;
  int64_t best_room = 0;
  for (const auto& [name, b] : backends_) {
    if (gone(*b) || name == avoid) continue;
    const int64_t room = room_of(*b);
    if (!best || room > best_room || (room == best_room && count[name] < count[best->name])) {
      best = b;
      best_room = room;
    }
  }
  if (!best)
    throw HttpError{503,
                    error_body(backends_.empty() ? "no node is serving (the cluster has no live node)"
                                                 : "no node is serving (every node of the cluster was lost)",
                               "server_error", "", "no_node")};
  if (!program_id.empty()) {
    placed_[program_id] = best;
    if (backends_.size() > 1) {
      spdlog::info("gateway: program `{}` placed on `{}` ({} free pages)", program_id, best->name, best_room);
      mark("placed", program_id, best->name, best_room);
    }
  }
  return best;
}

bool GatewayBackends::room_elsewhere(const std::string& name, int64_t pages) const {
  std::lock_guard l(m_);
  for (const auto& [other, b] : backends_)
    if (other != name && !gone(*b) && room_of(*b) >= pages) return true;
  return false;
}

void GatewayBackends::moved(const std::string& id, const std::string& from, double waited_s) {
  std::lock_guard l(m_);
  ++moves_;
  placed_.erase(id);
  spdlog::info("gateway: program `{}` waited {:.1f} s for room on `{}`; another node has room: it moves", id,
               waited_s, from);
  mark("moved for room", id, from, -1);
}

void GatewayBackends::carried(uint64_t bytes) {
  std::lock_guard l(m_);
  ++kv_moves_;
  kv_bytes_ += static_cast<int64_t>(bytes);
}

void GatewayBackends::set_trace(std::shared_ptr<Trace> trace) {
  std::lock_guard l(m_);
  trace_ = std::move(trace);
  if (trace_) trace_->name_lane(Trace::kClusterPid, 1, "placement");
}

void GatewayBackends::mark(const std::string& what, const std::string& program, const std::string& node,
                           int64_t pages) const {
  if (!trace_) return;
  std::string args = "{\"program\":" + Trace::quote(program) + ",\"node\":" + Trace::quote(node);
  if (pages >= 0) args += ",\"free_pages\":" + std::to_string(pages);
  trace_->instant("placement", what + " " + program, Trace::kClusterPid, 1, trace_->now_us(), args + "}");
}

std::shared_ptr<GatewayBackend> GatewayBackends::find(const std::string& id) const {
  std::lock_guard l(m_);
  auto it = placed_.find(id);
  return it == placed_.end() ? nullptr : it->second;
}

void GatewayBackends::forget(const std::string& id) {
  std::lock_guard l(m_);
  placed_.erase(id);
}

void GatewayBackends::place_at(const std::string& id, std::shared_ptr<GatewayBackend> b) {
  std::lock_guard l(m_);
  placed_[id] = std::move(b);
}

bool GatewayBackends::add(std::shared_ptr<GatewayBackend> b) {
  std::shared_ptr<GatewayBackend> old;
  {
    std::lock_guard l(m_);
    if (stopped_) return false;
    if (auto it = backends_.find(b->name); it != backends_.end()) old = it->second;
    backends_[b->name] = std::move(b);
  }
  if (old) old->programs->stop();
  return true;
}

void GatewayBackends::remove(const std::string& name) {
  std::shared_ptr<GatewayBackend> b;
  {
    std::lock_guard l(m_);
    auto it = backends_.find(name);
    if (it == backends_.end()) return;
    b = it->second;
    backends_.erase(it);
  }
  b->programs->stop();
}

std::vector<std::shared_ptr<GatewayBackend>> GatewayBackends::all() const {
  std::lock_guard l(m_);
  std::vector<std::shared_ptr<GatewayBackend>> out;
  for (const auto& [name, b] : backends_) out.push_back(b);
  return out;
}

std::vector<std::shared_ptr<GatewayBackend>> GatewayBackends::stop() {
  auto out = all();
  std::lock_guard l(m_);
  stopped_ = true;
  return out;
}

void GatewayBackends::set_unavailable(const std::string& why) {
  std::lock_guard l(m_);
  unavailable_ = why;
}

std::string GatewayBackends::unavailable() const {
  std::lock_guard l(m_);
  return unavailable_;
}

json GatewayBackends::programs_json() const {
  const auto backends = all();
  if (backends.size() == 1 && !backends[0]->up) return backends[0]->programs->list();
  json data = json::array();
  for (const auto& b : backends) {
    const json list = b->programs->list();  // kept: the loop reads into it
    for (json p : list["data"]) {
      p["node"] = b->name;
      data.push_back(std::move(p));
    }
  }
  return json{{"object", "list"}, {"data", data}};
}

void GatewayBackends::restarted() {
  std::lock_guard l(m_);
  ++restarts_;
}

void GatewayBackends::replayed(int64_t generations, int64_t tokens, int64_t tool_results) {
  std::lock_guard l(m_);
  replayed_generations_ += generations;
  replayed_tokens_ += tokens;
  replayed_tools_ += tool_results;
}

std::string GatewayBackends::metrics_text() const {
  const auto backends = all();
  // One local engine (`chorus serve`): its series as they are. A coordinator labels every node's,
  // and has its own, however few nodes are left.
  if (backends.size() == 1 && !backends[0]->up) return backends[0]->programs->metrics_text();
  std::string out;
  {
    std::lock_guard l(m_);
    auto counter = [&](const char* name, const char* help, int64_t v) {
      append_metric(out, name, "counter", help, static_cast<double>(v));
    };
    counter("chorus_cluster_program_moves_total", "Programs moved to another node for room (global queue)",
            moves_);
    counter("chorus_cluster_kv_moves_total", "Moved programs whose KV went with them (the others recompute)",
            kv_moves_);
    counter("chorus_cluster_kv_moved_bytes_total", "KV bytes sent between nodes with moved programs",
            kv_bytes_);
    counter("chorus_cluster_topology_restarts_total", "Topology programs run again after their node was lost",
            restarts_);
    counter("chorus_cluster_journal_generations_total",
            "Generations given back from topology programs' journals", replayed_generations_);
    counter("chorus_cluster_journal_tokens_total",
            "Tokens of those generations (forwarded, not generated again)", replayed_tokens_);
    counter("chorus_cluster_journal_tool_results_total", "Tool results given back (the tools not run again)",
            replayed_tools_);
  }
  std::map<std::string, bool> described;
  for (const auto& b : backends) {
    std::istringstream in(b->programs->metrics_text());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# ", 0) == 0) {
        if (!described[line]) out += line + "\n";
        described[line] = true;
        continue;
      }
      const size_t sp = line.find(' ');
      if (sp == std::string::npos) continue;
      out += line.substr(0, sp) + "{node=\"" + b->name + "\"}" + line.substr(sp) + "\n";
    }
  }
  return out;
}

}  // namespace chorus
