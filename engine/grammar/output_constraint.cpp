#include "engine/grammar/output_constraint.h"

#include <nlohmann/json.hpp>

#include "engine/grammar/json_schema.h"

namespace chorus {

Result<Grammar> grammar_of(const OutputConstraint& c) {
  switch (c.kind) {
    case OutputConstraint::Kind::none: return make_error(Errc::invalid_argument, "no output constraint");
    case OutputConstraint::Kind::json_object: return json_object_grammar();
    case OutputConstraint::Kind::json_schema: {
      nlohmann::json schema;
      try {
        schema = nlohmann::json::parse(c.schema);
      } catch (const nlohmann::json::exception& e) {
        return make_error(Errc::invalid_argument, std::string("JSON schema: not valid JSON: ") + e.what());
      }
      return json_schema_grammar(schema);
    }
  }
  return make_error(Errc::invalid_argument, "unknown output constraint kind");
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(capacity, 1)) {}

Result<std::shared_ptr<const TokenGrammar>> GrammarCache::get(const OutputConstraint& c) {
  const std::string key = std::to_string(static_cast<int>(c.kind)) + ":" + c.schema;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = map_.find(key); it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
  }
  auto g = grammar_of(c);
  if (!g) return g.error();
  auto tg = TokenGrammar::create(std::move(*g), vocab_);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = map_.find(key); it != map_.end()) return it->second.first;  // made meanwhile
  order_.push_front(key);
  map_[key] = {tg, order_.begin()};
  while (map_.size() > capacity_) {
    map_.erase(order_.back());
    order_.pop_back();
  }
  return tg;
}

}  // namespace chorus
