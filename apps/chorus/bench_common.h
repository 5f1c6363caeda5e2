// Helpers shared by the engine benchmarks (`chorus bench --views`, `--hybrid`).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/step/engine.h"

namespace chorus::app {

// Exactly n tokens: `text` encoded and repeated.
inline std::vector<TokenId> repeated_tokens(const Tokenizer& tok, const std::string& text, size_t n) {
  const auto para = tok.encode(text);
  std::vector<TokenId> ids;
  while (ids.size() < n && !para.empty()) ids.insert(ids.end(), para.begin(), para.end());
  ids.resize(n);
  return ids;
}

// A greedy generate of exactly n tokens into w (no stop at end-of-turn), starting from `start`.
inline Request greedy_generate(BlockId w, std::vector<BlockId> view, TokenId start, int n) {
  StopCondition stop;
  stop.max_tokens = n;
  stop.at_end_of_generation = false;
  return Request::generate(w, std::move(view), {start}, SamplingParams::greedy(), stop);
}

}  // namespace chorus::app
