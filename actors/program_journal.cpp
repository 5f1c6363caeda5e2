#include "actors/program_journal.h"

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

void ProgramJournal::touch(const std::string& role, int run, int k) {
  auto [it, fresh] = touched_.try_emplace(role, run, k);
  if (!fresh && std::make_pair(run, k) > it->second) it->second = {run, k};
}

void ProgramJournal::diverge() {
  diverged_ = true;
  for (auto& [role, runs] : roles_) {
    auto t = touched_.find(role);
    if (t == touched_.end()) {
      runs.clear();
    } else {
      const auto [run, k] = t->second;
      drop_from(role, run, k + 1);
    }
  }
}

void ProgramJournal::begin(const std::string& role, int run, int k, const std::vector<TokenId>& input) {
  std::lock_guard<std::mutex> l(m_);
  touch(role, run, k);
  drop_from(role, run, k);
  std::vector<Run>& runs = roles_[role];
  if (runs.size() < static_cast<size_t>(run) + 1) runs.resize(static_cast<size_t>(run) + 1);
  auto& reqs = runs[static_cast<size_t>(run)].requests;
  reqs.resize(static_cast<size_t>(k) + 1);
  if (full()) {  // recorded no more: a later run does this request and what follows live
    reqs.pop_back();
    return;
  }
  bytes_ += static_cast<int64_t>(sizeof(TokenId) * input.size());
  reqs.back() = Generation{input, {}, {}, {}, false, FinishReason::completed};
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

void ProgramJournal::tool(const std::string& role, int run, int call, const std::string& result) {
  std::lock_guard<std::mutex> l(m_);
  auto it = roles_.find(role);
  if (it == roles_.end() || static_cast<size_t>(run) >= it->second.size()) return;
  auto& tools = it->second[static_cast<size_t>(run)].tools;
  if (call < 0 || static_cast<size_t>(call) > tools.size()) return;
  tools.resize(static_cast<size_t>(call));  // a call run live again replaces what an earlier run recorded
  if (full()) return;
  bytes_ += static_cast<int64_t>(result.size());
  tools.push_back(result);
}

std::optional<ProgramJournal::Generation> ProgramJournal::replay(const std::string& role, int run, int k,
                                                                 const std::vector<TokenId>& input) {
  std::lock_guard<std::mutex> l(m_);
  const Generation* g = at(role, run, k);
  if (diverged_ || g == nullptr || !g->finished || g->input != input) {
    // Another input: the program took another path, and what the other roles recorded past the
    // point this run has reached may rest on blocks it now writes otherwise.
    if (!diverged_ && g != nullptr && g->finished) diverge();
    return std::nullopt;  // the role runs it live: begin() drops its records from there
  }
  touch(role, run, k);
  ++replayed_.requests;
  for (TokenId t : g->out) replayed_.tokens += t >= 0 ? 1 : 0;
  return *g;
}

std::optional<std::string> ProgramJournal::replay_tool(const std::string& role, int run, int call) {
  std::lock_guard<std::mutex> l(m_);
  auto it = roles_.find(role);
  if (it == roles_.end() || static_cast<size_t>(run) >= it->second.size()) return std::nullopt;
  const auto& tools = it->second[static_cast<size_t>(run)].tools;
  if (diverged_ || call < 0 || static_cast<size_t>(call) >= tools.size()) return std::nullopt;
  ++replayed_.tool_results;
  return tools[static_cast<size_t>(call)];
}

std::string ProgramJournal::deliver(const std::string& sink, const std::string& text) {
  std::lock_guard<std::mutex> l(m_);
  SinkCount& s = sinks_[sink];
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

bool ProgramJournal::stopped_recording() const {
  std::lock_guard<std::mutex> l(m_);
  return full();
}

int64_t ProgramJournal::delivered(const std::string& sink) const {
  std::lock_guard<std::mutex> l(m_);
  auto it = sinks_.find(sink);
  return it == sinks_.end() ? 0 : it->second.delivered;
}

void ProgramJournal::new_run() {
  std::lock_guard<std::mutex> l(m_);
  for (auto& [name, s] : sinks_) s.seen = 0;
  touched_.clear();
  diverged_ = false;
}

ProgramJournal::Counts ProgramJournal::replayed() const {
  std::lock_guard<std::mutex> l(m_);
  return replayed_;
}

}  // namespace chorus
