// What the grammar fuzz targets share: a compiled grammar walked over bytes (no vocabulary), the
// way a model's text would walk it — it must have a start state and never die on the way.
#pragma once

#include <memory>
#include <string_view>

#include "engine/grammar/matcher.h"

namespace chorus::fuzz {

inline void walk(Grammar g, std::string_view text) {
  (void)g.to_string();
  auto vocab = std::make_shared<TokenVocab>();  // no tokens: the walk is over bytes
  vocab->first = {0, 0};
  vocab->node_tokens.resize(1);
  auto tg = TokenGrammar::create(std::move(g), vocab);
  GrammarState s = tg->start();
  if (s.empty()) __builtin_trap();  // a checked grammar always has somewhere to start
  for (char c : text) {
    s = tg->advance(s, std::string_view(&c, 1));
    if (s.empty()) break;
  }
}

}  // namespace chorus::fuzz
