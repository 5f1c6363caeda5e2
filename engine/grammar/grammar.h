// A context-free grammar over bytes: what a constrained generation may write. JSON schemas
// (json_schema.h) compile to one; GrammarMatcher (matcher.h) walks it as tokens are chosen.
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a sequence
// of elements, each a set of bytes (one byte from it) or a reference to a rule. The empty
// alternative is the empty string. Text is bytes (UTF-8 is spelled out byte by byte by whoever
// builds the grammar), so a token's bytes are matched as they are, whatever its boundaries.
//
// GrammarBuilder::build checks what a matcher relies on, so that a bad grammar is an error at
// compile time, never a hang or a dead end while generating:
//   1. every referenced rule has a definition;
//   2. every rule derives at least one finite string (no rule is "recursive without end", no
//      alternative list is empty: an unsatisfiable constraint);
//   3. no rule reaches itself without consuming a byte (left recursion: the matcher expands
//      references eagerly).
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace chorus {

using ByteSet = std::bitset<256>;

// The compiled grammar: elements of every alternative in one array, each alternative ended by
// an `end` element, so that a position is one index.
class Grammar {
 public:
  enum class Kind : uint8_t { end, bytes, rule };
  struct Elem {
    Kind kind = Kind::end;
    int32_t arg = 0;  // bytes: index into sets(); rule: the rule's id
  };

  const std::vector<Elem>& elems() const { return elems_; }
  const ByteSet& set(int32_t i) const { return sets_[static_cast<size_t>(i)]; }
  // Where each alternative of `rule` starts in elems().
  const std::vector<uint32_t>& alts(int32_t rule) const { return alts_[static_cast<size_t>(rule)]; }
  int32_t root() const { return root_; }
  size_t n_rules() const { return alts_.size(); }
  const std::string& rule_name(int32_t rule) const { return names_[static_cast<size_t>(rule)]; }

  // The grammar in a GBNF-like notation, one rule per line (for errors, docs and tests).
  std::string to_string() const;

 private:
  friend class GrammarBuilder;
  std::vector<Elem> elems_;
  std::vector<ByteSet> sets_;
  std::vector<std::vector<uint32_t>> alts_;
  std::vector<std::string> names_;
  int32_t root_ = 0;
};

class GrammarBuilder {
 public:
  struct Elem {
    bool is_rule = false;
    int32_t rule = -1;
    ByteSet bytes;
  };
  using Seq = std::vector<Elem>;

  static Elem byte(uint8_t c);
  static Elem bytes(ByteSet s);
  static Elem ref(int32_t rule);
  static Seq literal(std::string_view s);  // its bytes, in order
  // Bytes lo..hi (inclusive).
  static ByteSet range(uint8_t lo, uint8_t hi);

  // A new rule, defined later with define() (so that rules may refer to each other).
  int32_t declare(std::string name);
  void define(int32_t rule, std::vector<Seq> alts);
  int32_t add(std::string name, std::vector<Seq> alts);  // declare + define
  // `item` repeated min..max times (max < 0: no upper bound), as its own rule.
  int32_t repeat(std::string name, const Seq& item, int64_t min, int64_t max);

  size_t n_rules() const { return rules_.size(); }

  // The grammar whose sentences are those of `root`, checked (the header's 1-3).
  // Errc::invalid_argument naming the rule at fault.
  Result<Grammar> build(int32_t root) const;

 private:
  struct Rule {
    std::string name;
    std::vector<Seq> alts;
    bool defined = false;
  };
  std::vector<Rule> rules_;
};

}  // namespace chorus
