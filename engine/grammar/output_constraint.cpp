#include "engine/grammar/output_constraint.h"

#include <nlohmann/json.hpp>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"

namespace chorus {

Result<Grammar> grammar_of(const OutputConstraint& c) {
  switch (c.kind) {
    case OutputConstraint::Kind::none: return make_error(Errc::invalid_argument, "no output constraint");
    case OutputConstraint::Kind::json_object: return json_object_grammar();
    case OutputConstraint::Kind::gbnf: return gbnf_grammar(c.schema);
    case OutputConstraint::Kind::json_schema:
    case OutputConstraint::Kind::tool_calls: {
      const bool tools = c.kind == OutputConstraint::Kind::tool_calls;
      const auto doc = nlohmann::ordered_json::parse(c.schema, nullptr, false);  // its order kept
      if (doc.is_discarded())
        return make_error(Errc::invalid_argument,
                          tools ? "tool calls: the tools are not valid JSON" : "JSON schema: not valid JSON");
      return tools ? tool_call_grammar(doc) : json_schema_grammar(doc);
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
