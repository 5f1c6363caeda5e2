#include "engine/forward/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace chorus {

TokenId argmax(std::span<const float> logits) {
  TokenId best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<TokenId>(i);
  return best;
}

Sampler::Sampler(SamplingParams params) : p_(std::move(params)), rng_(p_.seed) {
  if (p_.grammar) matcher_ = std::make_unique<GrammarMatcher>(p_.grammar);
}

namespace {

// Candidates in the sampler's order: larger logit first, lower id first among equals.
bool by_logit(const std::pair<float, TokenId>& a, const std::pair<float, TokenId>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The uniform draw of one sample: std::uniform_real_distribution<double>(0, total) is
// u * total with this u (libstdc++), so drawing u first and scaling it later is the same draw.
double next_uniform(std::mt19937_64& rng) {
  return std::generate_canonical<double, std::numeric_limits<double>::digits>(rng);
}
}  // namespace

TokenId Sampler::sample(std::span<const float> logits, std::span<const TokenId> history) {
  const TokenId t = sample_at(logits, history, p_.temperature > 0.0f ? next_uniform(rng_) : 0.0);
  if (matcher_ && (t == kNoToken || !matcher_->accept(t))) return kNoToken;
  if (t >= 0 && (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)) {
    if (drawn_.size() != logits.size()) drawn_.assign(logits.size(), 0);
    ++drawn_[static_cast<size_t>(t)];
  }
  return t;
}

std::vector<TokenLogprob> token_logprobs(std::span<const float> logits, TokenId chosen, int top) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  auto lp = [&](TokenId t) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(t)]) - lse);
  };
  std::vector<TokenLogprob> out;
  out.push_back({chosen, chosen >= 0 && static_cast<size_t>(chosen) < logits.size() ? lp(chosen) : 0.0f});
  // The top ones by insertion into a short sorted list: one pass, no copy of the vocabulary.
  const size_t k = static_cast<size_t>(std::clamp<int64_t>(top, 0, static_cast<int64_t>(logits.size())));
  std::vector<TokenId> best;
  best.reserve(k + 1);
  for (size_t i = 0; i < logits.size() && k > 0; ++i) {
    if (best.size() == k && !(logits[i] > logits[static_cast<size_t>(best.back())])) continue;
    auto at = std::upper_bound(best.begin(), best.end(), logits[i],
                               [&](float v, TokenId b) { return v > logits[static_cast<size_t>(b)]; });
    best.insert(at, static_cast<TokenId>(i));
    if (best.size() > k) best.pop_back();
  }
  for (TokenId t : best) out.push_back({t, lp(t)});
  return out;
}

std::optional<PlannedDraw> Sampler::plan_draw(int max_top_k) {
  if (!p_.forbidden.empty() || p_.repeat_penalty != 1.0f || matcher_ || !p_.logit_bias.empty() ||
      p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f || p_.logprobs >= 0)
    return std::nullopt;
  PlannedDraw d;
  if (!(p_.temperature > 0.0f)) return d;  // greedy
  if (p_.top_k < 1 || p_.top_k > max_top_k) return std::nullopt;
  d.temperature = p_.temperature;
  d.top_p = p_.top_p;
  d.min_p = p_.min_p;
  d.top_k = p_.top_k;
  d.u = next_uniform(rng_);
  return d;
}

// Many candidates and no filter after top-k (an OpenAI request: no top-k, top-p 1, min-p 0):
// sorting them all (49k for SmolLM2) cost 18 % of a serving engine's time (perf, bench_programs).
// Only the draw needs their order, and only down to where it lands, which for a peaked
// distribution is near the top: the order is sorted a chunk at a time as the draw walks it. The
// same token as a full sort, but for the last bits of the total (summed in another order).
TokenId Sampler::draw_unfiltered(size_t keep, double u) {
  if (keep < cand_.size()) {  // the top-k set, unordered
    std::nth_element(cand_.begin(), cand_.begin() + static_cast<long>(keep) - 1, cand_.end(), by_logit);
    cand_.resize(keep);
  }
  float mx = cand_.front().first;
  for (const auto& c : cand_) mx = std::max(mx, c.first);
  auto weight = [&](float logit) { return std::exp(static_cast<double>(logit - mx) / p_.temperature); };
  double total = 0.0;
  for (const auto& c : cand_) total += weight(c.first);
  double r = u * total;
  size_t sorted = 0, chunk = 64;
  while (sorted < keep) {
    const size_t end = std::min(keep, sorted + chunk);
    std::partial_sort(cand_.begin() + static_cast<long>(sorted), cand_.begin() + static_cast<long>(end),
                      cand_.end(), by_logit);
    for (size_t i = sorted; i < end; ++i) {
      r -= weight(cand_[i].first);
      if (r <= 0.0) return cand_[i].second;
    }
    sorted = end;
    chunk *= 4;
  }
  return cand_[keep - 1].second;
}

TokenId Sampler::sample_at(std::span<const float> logits, std::span<const TokenId> history, double u) {
  if (!gather(logits)) return matcher_ ? kNoToken : argmax(logits);
  adjust(logits.size(), history);
  if (p_.temperature <= 0.0f) return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) keep = static_cast<size_t>(p_.top_k);
  if (keep > kSortedDrawFrom && p_.top_p >= 1.0f && p_.min_p <= 0.0f) return draw_unfiltered(keep, u);
  return draw_filtered(keep, u);
}

// The candidates: every token neither forbidden nor (with a grammar) refused by the matcher.
bool Sampler::gather(std::span<const float> logits) {
  const size_t n = logits.size();
  if (forbidden_mask_.size() != n) {
    forbidden_mask_.assign(n, 0);
    for (TokenId t : p_.forbidden)
      if (t >= 0 && static_cast<size_t>(t) < n) forbidden_mask_[static_cast<size_t>(t)] = 1;
  }
  cand_.clear();
  if (matcher_) {
    const std::shared_ptr<const TokenMask> allowed = matcher_->allowed();
    for (size_t i = 0; i < n; ++i)
      if (!forbidden_mask_[i] && allowed->test(static_cast<TokenId>(i)))
        cand_.emplace_back(logits[i], static_cast<TokenId>(i));
  } else {
    for (size_t i = 0; i < n; ++i)
      if (!forbidden_mask_[i]) cand_.emplace_back(logits[i], static_cast<TokenId>(i));
  }
  return !cand_.empty();
}

// The candidates' logits after the bias, the repetition penalty over `history`, and the presence
// and frequency penalties over the tokens drawn.
void Sampler::adjust(size_t n, std::span<const TokenId> history) {
  if (!p_.logit_bias.empty()) {
    if (bias_.size() != n) {
      bias_.assign(n, 0.0f);
      for (const auto& [t, b] : p_.logit_bias)
        if (t >= 0 && static_cast<size_t>(t) < n) bias_[static_cast<size_t>(t)] += b;
    }
    for (auto& [logit, id] : cand_) logit += bias_[static_cast<size_t>(id)];
  }
  if (p_.repeat_penalty != 1.0f && !history.empty()) {
    const size_t from = history.size() > static_cast<size_t>(std::max(0, p_.repeat_last_n))
                            ? history.size() - static_cast<size_t>(std::max(0, p_.repeat_last_n))
                            : 0;
    std::vector<uint8_t> seen(n, 0);
    for (size_t i = from; i < history.size(); ++i)
      if (history[i] >= 0 && static_cast<size_t>(history[i]) < n) seen[static_cast<size_t>(history[i])] = 1;
    for (auto& [logit, id] : cand_)
      if (seen[static_cast<size_t>(id)])
        logit = logit > 0 ? logit / p_.repeat_penalty : logit * p_.repeat_penalty;
  }
  if (drawn_.size() == n) {
    for (auto& [logit, id] : cand_)
      if (const int c = drawn_[static_cast<size_t>(id)]; c > 0)
        logit -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(c);
  }
}

// The best `keep` candidates, filtered by top-p and min-p (probabilities at temperature 1), then
// the draw at the temperature.
TokenId Sampler::draw_filtered(size_t keep, double u) {
  std::partial_sort(cand_.begin(), cand_.begin() + static_cast<long>(keep), cand_.end(), by_logit);
  cand_.resize(keep);
  const float mx = cand_.front().first;
  std::vector<float> prob(keep);
  float sum = 0.0f;
  for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(cand_[i].first - mx);
  for (float& p : prob) p /= sum;
  if (p_.top_p < 1.0f) {
    float cum = 0.0f;
    size_t k = 0;
    while (k < keep) {
      cum += prob[k++];
      if (cum >= p_.top_p) break;
    }
    keep = std::max<size_t>(k, 1);
  }
  if (p_.min_p > 0.0f) {
    size_t k = 1;
    while (k < keep && prob[k] >= p_.min_p * prob[0]) ++k;
    keep = k;
  }
  cand_.resize(keep);
  std::vector<double> w(keep);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i)
    total += w[i] = std::exp(static_cast<double>(cand_[i].first - mx) / p_.temperature);
  double r = u * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= w[i];
    if (r <= 0.0) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace chorus
