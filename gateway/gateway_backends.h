// Where a gateway's programs run (gateway/gateway.h): its backends — the node's memory actor
// (`chorus serve`), or one per node behind a coordinator — each with its own HTTP session table and
// program scheduler (GatewayPrograms), and which backend each program is on. Internal to the
// gateway library. Every method is safe from any HTTP worker thread.
//
// Placement: a program stays on its backend while that backend is there and not lost; a new one
// (or one whose backend went) goes to the backend with the most room, fewer programs breaking
// ties: room is the smaller of the node's free pages (its last heartbeat) and the pages its
// programs here leave of its capacity were they all resident (the heartbeat lags programs just
// placed, and a paused program will want its pages back). A backend is *lost* when its node went away under a
// request: it takes nothing more, and its programs go elsewhere at their next request.
//
// The global waiting queue (ThunderAgent §4.3.2): a request that waits for room on its backend
// longer than GatewayOptions::migrate_after_s while another backend has room for it moves there
// (room_elsewhere(), then place() avoiding the first): the program is released where it waited
// and its block prefilled on the other from the client's history — a migration by recompute.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "gateway/gateway_programs.h"

namespace chorus {

class Trace;

struct GatewayBackend {
  std::string name;
  std::shared_ptr<GatewayPrograms> programs;
  std::function<int64_t()> room;  // its free KV pages now (null: one backend, no choice to make)
  std::function<bool()> up;       // whether its node answers now (null: always: a local engine)
  std::atomic<bool> lost{false};
};

class GatewayBackends {
 public:
  // The backend a request of `program_id` ("": a one-shot request) runs on, never `avoid` ("":
  // any). Throws HttpError 503 `no_node` when there is none.
  std::shared_ptr<GatewayBackend> place(const std::string& program_id, const std::string& avoid = "");
  // The global waiting queue's test: whether a backend other than `name` has room for `pages`
  // now (room as place() counts it).
  bool room_elsewhere(const std::string& name, int64_t pages) const;
  // A program moved off `from` for room (counted for /metrics, logged).
  void moved(const std::string& id, const std::string& from, double waited_s);
  // A moved program's KV reached its new node (`bytes` of it): counted for /metrics.
  void carried(uint64_t bytes);
  // A topology program ran again after its node was lost (`restarted`), and what its journal gave
  // back when it ended: counted for /metrics.
  void restarted();
  void replayed(int64_t generations, int64_t tokens, int64_t tool_results);
  // The backend program `id` is on (null: none), and forgetting it (released).
  std::shared_ptr<GatewayBackend> find(const std::string& id) const;
  void forget(const std::string& id);
  void place_at(const std::string& id, std::shared_ptr<GatewayBackend> b);  // it is there (taken over)

  // Adds `b` (one of the same name is replaced; its programs stop). False once stopped.
  bool add(std::shared_ptr<GatewayBackend> b);
  void remove(const std::string& name);  // its waiting requests end (503), its programs are forgotten
  std::vector<std::shared_ptr<GatewayBackend>> all() const;
  // Takes no backend any more; returns those there were.
  std::vector<std::shared_ptr<GatewayBackend>> stop();

  // While not empty, chat completions are refused with this (a standby coordinator's word).
  void set_unavailable(const std::string& why);
  std::string unavailable() const;

  // GET /programs and GET /metrics: every backend's, with its node (a `node` label) on a
  // coordinator however many nodes are left; one local engine's as they are.
  nlohmann::json programs_json() const;
  std::string metrics_text() const;
  // Placements, moves and programs started again elsewhere as instants of the trace (null: none).
  void set_trace(std::shared_ptr<Trace> trace);

 private:
  mutable std::mutex m_;
  std::map<std::string, std::shared_ptr<GatewayBackend>> backends_;  // by name
  std::map<std::string, std::shared_ptr<GatewayBackend>> placed_;    // program id -> where it runs
  bool stopped_ = false;
  std::string unavailable_;
  int64_t moves_ = 0;
  int64_t kv_moves_ = 0, kv_bytes_ = 0;
  int64_t restarts_ = 0, replayed_generations_ = 0, replayed_tokens_ = 0, replayed_tools_ = 0;
  std::shared_ptr<Trace> trace_;
  void mark(const std::string& what, const std::string& program, const std::string& node,
            int64_t pages) const;
};

}  // namespace chorus
