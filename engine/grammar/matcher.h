// Constrained decoding: which tokens may come next under a grammar (grammar.h), and the walk
// through it as tokens are chosen.
//
// A matcher's state is the set of parse stacks the text so far leaves open (each stack: the
// positions still to match, innermost last; an empty stack: the text is a whole sentence). A
// token is allowed when all of its bytes can follow; an end-of-generation token when the text
// is whole. The allowed set is found by walking the vocabulary's bytes as a trie from the state
// (a prefix that no stack accepts cuts its whole subtree), and kept per state: inside a JSON
// string, or between two digits, every step is in the state of the step before, so most steps
// find their mask in the cache (TokenGrammar, shared by every matcher of one grammar).
//
// Thread-safety: a TokenGrammar may be shared by matchers on any threads (its cache locks); a
// GrammarMatcher belongs to one generation.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus {

// A set of token ids (bit i: token i).
struct TokenMask {
  std::vector<uint64_t> bits;  // [ceil(n_vocab / 64)]
  int64_t count = 0;
  bool test(TokenId t) const {
    return t >= 0 && static_cast<size_t>(t) / 64 < bits.size() &&
           ((bits[static_cast<size_t>(t) / 64] >> (t % 64)) & 1);
  }
};

// Open parse stacks, bottom first; sorted and without repeats, so equal states compare equal.
using GrammarState = std::vector<std::vector<uint32_t>>;

// A vocabulary's tokens as bytes, in a trie, for masks: built once per model (TokenGrammar
// shares it). Control tokens are left out but the end-of-generation ones, which are kept apart.
class TokenVocab {
 public:
  static std::shared_ptr<const TokenVocab> create(const Tokenizer& tok);

  size_t size() const { return pieces_.size(); }
  const std::string& bytes(TokenId t) const { return pieces_[static_cast<size_t>(t)]; }
  bool is_end(TokenId t) const;
  const std::vector<TokenId>& ends() const { return ends_; }

  // Node i's children are edges [first[i], first[i + 1]); node 0 is the root.
  std::vector<uint32_t> first;
  std::vector<uint8_t> edge_byte;
  std::vector<uint32_t> edge_node;
  std::vector<std::vector<TokenId>> node_tokens;  // tokens whose bytes end at a node

 private:
  std::vector<std::string> pieces_;  // [n_vocab] a token's bytes; empty for a control token
  std::vector<TokenId> ends_;        // end-of-generation tokens
};

class TokenGrammar {
 public:
  // The grammar against a vocabulary (control tokens are never allowed but the
  // end-of-generation ones, and those only when the text is whole).
  static std::shared_ptr<const TokenGrammar> create(Grammar g, std::shared_ptr<const TokenVocab> vocab);
  static std::shared_ptr<const TokenGrammar> create(Grammar g, const Tokenizer& tok);

  const Grammar& grammar() const { return g_; }
  const TokenVocab& vocab() const { return *vocab_; }

  GrammarState start() const;
  // The state after `bytes` (empty: they cannot follow).
  GrammarState advance(const GrammarState& s, std::string_view bytes) const;
  static bool whole(const GrammarState& s);  // it holds an empty stack

  // The tokens allowed in state `s` (cached; the pointer stays valid while it is held).
  std::shared_ptr<const TokenMask> mask(const GrammarState& s) const;
  // Masks computed (cache misses) and looked up, since creation.
  int64_t n_masks_computed() const;
  int64_t n_masks_looked_up() const;

 private:
  TokenGrammar() = default;
  std::shared_ptr<const TokenMask> compute(const GrammarState& s) const;

  Grammar g_;
  std::shared_ptr<const TokenVocab> vocab_;

  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
  mutable int64_t computed_ = 0, looked_up_ = 0;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const TokenGrammar> g);

  // What may come next.
  std::shared_ptr<const TokenMask> allowed() const { return g_->mask(state_); }
  // Takes `t`; false (nothing changes) when it is not allowed.
  bool accept(TokenId t);
  // Takes bytes directly (a prompt's forced prefix, tests); false when they cannot follow.
  bool accept_bytes(std::string_view bytes);
  // The text so far is a whole sentence of the grammar.
  bool whole() const { return TokenGrammar::whole(state_); }
  // An end-of-generation token was accepted: nothing more may come.
  bool ended() const { return ended_; }
  const GrammarState& state() const { return state_; }

 private:
  std::shared_ptr<const TokenGrammar> g_;
  GrammarState state_;
  bool ended_ = false;
};

}  // namespace chorus
