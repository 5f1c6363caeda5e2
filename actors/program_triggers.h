// What the program roles share (internal to actors/program_roles.cpp and program_source.cpp):
// the triggers that start a role's runs, and the event-name helpers they use.
#pragma once

#include <set>
#include <string>

#include "actors/program_roles.h"

namespace chorus::program_roles::detail {

inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "x.done" -> "x" (the actor that emits it), else "".
inline std::string done_of(const std::string& event) {
  return ends_with(event, ".done") ? event.substr(0, event.size() - 5) : "";
}

struct TriggerState {
  std::set<std::string> after_left, upstream_left, upstream;
  bool after_fired = false;
  void init(const Triggers& t) {
    after_left = t.after;
    upstream_left = upstream = t.upstream;
  }
  // A patch: the actors emitting what it runs on are now `now` (those done left out). Those it
  // waited for still, and those new, are the ones it waits for.
  void rewire(const std::vector<std::string>& now) {
    std::set<std::string> next(now.begin(), now.end()), left;
    for (const auto& who : next)
      if (upstream_left.count(who) || !upstream.count(who)) left.insert(who);
    upstream_left = std::move(left);
    upstream = std::move(next);
  }
  // How many runs `ev` starts (0 or 1); also notes upstream actors that are done.
  int on_signal(const Triggers& t, const std::string& ev) {
    int runs = t.on.count(ev) ? 1 : 0;
    if (after_left.erase(ev) && after_left.empty() && !after_fired) {
      after_fired = true;
      ++runs;
    }
    if (const std::string who = done_of(ev); !who.empty()) upstream_left.erase(who);
    return runs;
  }
};

}  // namespace chorus::program_roles::detail
