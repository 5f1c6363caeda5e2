#include "actors/program_journal.h"

#include <algorithm>
#include <limits>

namespace chorus {

ProgramJournal::Generation* ProgramJournal::at(const std::string& role, int run, int k) {
  auto it = roles_.find(role);
  if (it == roles_.end() || run < 0 || static_cast<size_t>(run) >= it->second.size()) return nullptr;
  auto& reqs = it->second[static_cast<size_t>(run)].requests;
  return k >= 0 && static_cast<size_t>(k) < reqs.size() ? &reqs[static_cast<size_t>(k)] : nullptr;
}

void ProgramJournal::drop_from(const std::string& role, int run, int k) {
  auto it = roles_.find(role);
  if (it == roles_.end() || static_cast<size_t>(run) >= it->second.size()) return;
  std::vector<Run>& runs = it->second;
  runs.resize(static_cast<size_t>(run) + 1);
  Run& r = runs.back();
  if (static_cast<size_t>(k) < r.requests.size()) r.requests.resize(static_cast<size_t>(k));
  // Call k - 1's result led to request k: it stays; the calls after it go with the requests.
  if (static_cast<size_t>(k) < r.tools.size()) r.tools.resize(static_cast<size_t>(k));
}

void ProgramJournal::drop_after(int64_t seq) {
  for (auto& [role, runs] : roles_)
    for (size_t run = 0; run < runs.size(); ++run) {
      const auto& reqs = runs[run].requests;
      const auto later =
          std::find_if(reqs.begin(), reqs.end(), [&](const Generation& g) { return g.seq > seq; });
      if (later != reqs.end()) {
        drop_from(role, static_cast<int>(run), static_cast<int>(later - reqs.begin()));
        break;
      }
    }
}

void ProgramJournal::begin(const std::string& role, int run, int k, const std::vector<TokenId>& input) {
  std::lock_guard<std::mutex> l(m_);
  if (const Generation* old = at(role, run, k)) drop_after(old->seq);  // done otherwise from here
  drop_from(role, run, k);
  std::vector<Run>& runs = roles_[role];
  if (runs.size() < static_cast<size_t>(run) + 1) runs.resize(static_cast<size_t>(run) + 1);
  if (full()) return;  // recorded no more: a later run does this request and what follows live
  auto& reqs = runs[static_cast<size_t>(run)].requests;
  if (reqs.size() != static_cast<size_t>(k)) return;  // an earlier request of the run went unrecorded
  bytes_ += static_cast<int64_t>(sizeof(TokenId) * input.size());
  Generation g;
  g.input = input;
  g.seq = ++seq_;
  reqs.push_back(std::move(g));
}

void ProgramJournal::token(const std::string& role, int run, int k, TokenId id, const std::string& text) {
  std::lock_guard<std::mutex> l(m_);
  Generation* g = at(role, run, k);
  if (g == nullptr || g->finished) return;
  g->out.push_back(id);
  g->text += text;
  g->ends.push_back(static_cast<uint32_t>(g->text.size()));
  bytes_ += static_cast<int64_t>(sizeof(TokenId) + sizeof(uint32_t) + text.size());
}

void ProgramJournal::finish(const std::string& role, int run, int k, FinishReason reason) {
  std::lock_guard<std::mutex> l(m_);
  if (Generation* g = at(role, run, k)) {
    g->finished = true;
    g->reason = reason;
  }
}

void ProgramJournal::tool(const std::string& role, int run, int call, std::optional<std::string> result) {
  std::lock_guard<std::mutex> l(m_);
  auto it = roles_.find(role);
  if (it == roles_.end() || static_cast<size_t>(run) >= it->second.size()) return;
  Run& r = it->second[static_cast<size_t>(run)];
  // Recorded only beside the request that made it (a result without its call could not be used).
  if (call < 0 || static_cast<size_t>(call) >= r.requests.size()) return;
  r.tools.resize(static_cast<size_t>(call));  // a call run live again replaces what an earlier run recorded
  if (result && full()) return;
  if (result) bytes_ += static_cast<int64_t>(result->size());
  r.tools.push_back(std::move(result));
}

std::optional<ProgramJournal::Generation> ProgramJournal::replay(const std::string& role, int run, int k,
                                                                 const std::vector<TokenId>& input) {
  std::lock_guard<std::mutex> l(m_);
  const Generation* g = at(role, run, k);
  if (g == nullptr || !g->finished || g->input != input) return std::nullopt;
  ++replayed_.requests;
  for (TokenId t : g->out) replayed_.tokens += t >= 0 ? 1 : 0;
  return *g;
}

std::optional<std::string> ProgramJournal::replay_tool(const std::string& role, int run, int call) {
  std::lock_guard<std::mutex> l(m_);
  auto it = roles_.find(role);
  if (it == roles_.end() || static_cast<size_t>(run) >= it->second.size()) return std::nullopt;
  const auto& tools = it->second[static_cast<size_t>(run)].tools;
  if (call < 0 || static_cast<size_t>(call) >= tools.size() || !tools[static_cast<size_t>(call)])
    return std::nullopt;
  ++replayed_.tool_results;
  return tools[static_cast<size_t>(call)];
}

std::string ProgramJournal::deliver(const std::string& sink, const std::string& producer,
                                    const std::string& text) {
  std::lock_guard<std::mutex> l(m_);
  SinkCount& s = sinks_[{sink, producer}];
  const auto n = static_cast<int64_t>(text.size());
  s.seen += n;
  if (s.seen <= s.delivered) {
    replayed_.sink_bytes += n;
    return {};
  }
  const int64_t fresh = std::min(n, s.seen - s.delivered);
  replayed_.sink_bytes += n - fresh;
  s.delivered = s.seen;
  return text.substr(static_cast<size_t>(n - fresh));
}

int64_t ProgramJournal::delivered(const std::string& sink) const {
  std::lock_guard<std::mutex> l(m_);
  int64_t n = 0;
  for (const auto& [key, s] : sinks_) n += key.first == sink ? s.delivered : 0;
  return n;
}

void ProgramJournal::new_run() {
  std::lock_guard<std::mutex> l(m_);
  int64_t first_unfinished = std::numeric_limits<int64_t>::max();
  for (const auto& [role, runs] : roles_)
    for (const Run& r : runs)
      for (const Generation& g : r.requests)
        if (!g.finished) first_unfinished = std::min(first_unfinished, g.seq);
  if (first_unfinished != std::numeric_limits<int64_t>::max()) drop_after(first_unfinished);
  for (auto& [key, s] : sinks_) s.seen = 0;
}

ProgramJournal::Counts ProgramJournal::replayed() const {
  std::lock_guard<std::mutex> l(m_);
  return replayed_;
}

bool ProgramJournal::stopped_recording() const {
  std::lock_guard<std::mutex> l(m_);
  return full();
}

}  // namespace chorus
