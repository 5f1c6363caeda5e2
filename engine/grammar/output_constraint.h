// What a generate's output must be, as it travels (HTTP, node-port frames, topology roles):
// its source text, compiled where the model's vocabulary is (the engine, GrammarCache).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"

namespace chorus {

struct OutputConstraint {
  enum class Kind : uint8_t { none = 0, json_object = 1, json_schema = 2, tool_calls = 3, gbnf = 4 };
  static constexpr Kind kLastKind = Kind::gbnf;
  Kind kind = Kind::none;
  // json_schema: the schema, as JSON text; tool_calls: the tools, [{"name", "parameters"}, ...]
  // (json_schema.h, tool_call_grammar); gbnf: a grammar in GBNF (gbnf.h)
  std::string schema;

  bool empty() const { return kind == Kind::none; }
  bool operator==(const OutputConstraint&) const = default;
  static OutputConstraint json_schema_of(std::string schema_text) {
    return {Kind::json_schema, std::move(schema_text)};
  }
  static OutputConstraint any_json_object() { return {Kind::json_object, {}}; }
  static OutputConstraint tool_calls_of(std::string tools_json) {
    return {Kind::tool_calls, std::move(tools_json)};
  }
  static OutputConstraint gbnf_of(std::string grammar) { return {Kind::gbnf, std::move(grammar)}; }
};

// The constraint's grammar; Errc::invalid_argument for a schema that is not JSON, uses what is
// not supported or accepts nothing (json_schema.h), naming the keyword; for a GBNF grammar that
// does not parse or cannot constrain anything (gbnf.h), naming the line or the rule.
Result<Grammar> grammar_of(const OutputConstraint& c);

// Compiled constraints against one vocabulary, the most recent kept (a mask cache is per
// grammar, so requests with the same schema share their masks). Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity = 64);
  Result<std::shared_ptr<const TokenGrammar>> get(const OutputConstraint& c);

 private:
  std::shared_ptr<const TokenVocab> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::string> order_;  // most recent first
  std::unordered_map<std::string,
                     std::pair<std::shared_ptr<const TokenGrammar>, std::list<std::string>::iterator>>
      map_;
};

}  // namespace chorus
