// A trace of what a node did, written as Chrome / Perfetto trace-event JSON (`--trace FILE` on
// `chorus run`, `serve` and `node`; open it in ui.perfetto.dev or chrome://tracing):
//
//   pid 1 "engine"   tid 0: one complete event ("X") per engine step, its batch in args — tokens
//                    of decode, probe and prefill, and per request its block and tokens
//   pid 1            async spans ("b"/"e", cat "request") from a request's submit to its finish
//   pid 2 "blocks"   one lane per block (tid = block id, named by a thread_name record): an
//                    instant per step that appended to it, with the tokens and their text
//   pid 1 tid 1      instants for pauses and restores of blocks (cat "memory")
//   pid 3 "roles"    one lane per program (actors/program.h): an instant per event its roles
//                    fired (cat "role", with the roles it went to), a complete event per tool
//                    run (cat "tool"), instants when its sandbox is made and removed
//   pid 4 "gateway"  `serve` and the coordinator: an async span (cat "http") per completion
//                    request from its arrival to its last token, with its program, node, tokens
//   pid 5 "cluster"  the coordinator: tid 0 the membership (joins, departures, fencing), tid 1
//                    the placement of programs on nodes (placed, moved for room, started again)
//
// Bounded: a ring of the newest `capacity` events (default 1 << 20, about 200 MB of JSON at most;
// `dropped` in the file's otherData counts what fell out). Thread-safe: the engine's thread and the
// actors' record into one trace. Timestamps are microseconds since the trace began.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "base/status.h"

namespace chorus {

class Trace {
 public:
  // The processes of a trace: what recorded into it.
  static constexpr int kEnginePid = 1, kBlocksPid = 2, kRolesPid = 3, kGatewayPid = 4, kClusterPid = 5;
  static constexpr size_t kDefaultCapacity = size_t{1} << 20;
  explicit Trace(size_t capacity = kDefaultCapacity);

  int64_t now_us() const;
  int64_t clock_ns() const;
  // The time recorders spent recording (the engine charges each step's), for its overhead.
  void charge(int64_t ns) { spent_ns_ += ns; }
  double recording_seconds() const { return static_cast<double>(spent_ns_.load()) * 1e-9; }

  // `args` is a JSON object's text ("" : none); names and categories are plain text.
  void complete(const std::string& cat, const std::string& name, int pid, int64_t tid, int64_t ts_us,
                int64_t dur_us, std::string args = "");
  void instant(const std::string& cat, const std::string& name, int pid, int64_t tid, int64_t ts_us,
               std::string args = "");
  void async_begin(const std::string& cat, const std::string& name, int64_t id, int64_t ts_us,
                   std::string args = "", int pid = kEnginePid);
  void async_end(const std::string& cat, const std::string& name, int64_t id, int64_t ts_us,
                 std::string args = "", int pid = kEnginePid);
  int64_t us_at(std::chrono::steady_clock::time_point t) const;  // a time on the trace's clock
  // The name of lane `tid` of process `pid` (kept apart from the ring: never dropped).
  void name_lane(int pid, int64_t tid, const std::string& name);

  size_t size() const;
  int64_t dropped() const;
  // The trace as JSON text, and into a file (errors: the file cannot be written).
  std::string json() const;
  Status write(const std::string& path) const;

  // JSON string literal of `s` (quoted, escaped; invalid UTF-8 bytes as U+FFFD).
  static std::string quote(const std::string& s);

 private:
  struct Ev {
    char ph;
    std::string cat, name, args;
    int pid;
    int64_t tid, ts, dur, id;
  };
  void push(Ev e);

  const size_t capacity_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  mutable std::mutex m_;
  std::deque<Ev> ring_;
  int64_t dropped_ = 0;
  std::atomic<int64_t> spent_ns_{0};
  std::map<std::pair<int, int64_t>, std::string> lanes_;
};

}  // namespace chorus
