#include "engine/grammar/matcher.h"

#include <algorithm>
#include <map>

namespace chorus {

namespace {

// Most states a grammar's cache keeps before it starts over (a mask is n_vocab / 8 bytes: 6 KB
// for a 49k vocabulary).
constexpr size_t kMaxCachedMasks = 2048;
// Most parse stacks one state may hold. A grammar as ambiguous as that (anyOf over anyOf over
// lookalike schemas) would make every step slow; past it the text is taken as unable to go on,
// so the generation ends with an error instead of stalling the engine.
constexpr size_t kMaxStacks = 1024;

// Parse stacks as shared frames: a stack is the id of its top frame, a frame is a position and
// the frame below it (-1: none). Frames are interned, so that equal stacks have equal ids and a
// state is a sorted list of ids. The empty stack (the text is whole) is id -1.
class Walker {
 public:
  explicit Walker(const Grammar& g) : g_(g) {}

  int32_t intern(uint32_t pos, int32_t parent) {
    const uint64_t key = (static_cast<uint64_t>(pos) << 32) | static_cast<uint32_t>(parent);
    auto [it, fresh] = ids_.try_emplace(key, static_cast<int32_t>(frames_.size()));
    if (fresh) frames_.push_back({pos, parent});
    return it->second;
  }

  // The stacks a stack whose top is at a rule reference (or at bytes) opens: references are
  // expanded until every top is a byte set.
  void expand(int32_t id, std::vector<int32_t>& out) {
    if (out.size() >= kMaxStacks) {
      overflow_ = true;
      return;
    }
    if (id < 0) {
      out.push_back(-1);
      return;
    }
    const Frame f = frames_[static_cast<size_t>(id)];
    const Grammar::Elem& e = g_.elems()[f.pos];
    if (e.kind == Grammar::Kind::bytes) {
      out.push_back(id);
      return;
    }
    const int32_t cont = next(f.pos, f.parent);
    for (uint32_t a : g_.alts(e.arg))
      expand(g_.elems()[a].kind == Grammar::Kind::end ? cont : intern(a, cont), out);
  }

  // The stacks after byte b.
  void advance(const std::vector<int32_t>& in, uint8_t b, std::vector<int32_t>& out) {
    out.clear();
    for (int32_t id : in) {
      if (id < 0) continue;
      const Frame f = frames_[static_cast<size_t>(id)];
      if (!g_.set(g_.elems()[f.pos].arg).test(b)) continue;
      expand(next(f.pos, f.parent), out);
    }
    normalize(out);
    if (overflow_) {
      out.clear();
      overflow_ = false;
    }
  }

  static void normalize(std::vector<int32_t>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }

  std::vector<int32_t> load(const GrammarState& s) {
    std::vector<int32_t> out;
    for (const auto& stack : s) {
      int32_t id = -1;
      for (uint32_t pos : stack) id = intern(pos, id);
      out.push_back(id);
    }
    normalize(out);
    return out;
  }

  GrammarState store(const std::vector<int32_t>& ids) const {
    GrammarState s;
    for (int32_t id : ids) {
      std::vector<uint32_t> stack;
      for (int32_t f = id; f >= 0; f = frames_[static_cast<size_t>(f)].parent)
        stack.push_back(frames_[static_cast<size_t>(f)].pos);
      std::reverse(stack.begin(), stack.end());
      s.push_back(std::move(stack));
    }
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    return s;
  }

 private:
  struct Frame {
    uint32_t pos;
    int32_t parent;
  };
  // The stack once the element at pos is matched: the next element, or the frame below.
  int32_t next(uint32_t pos, int32_t parent) {
    return g_.elems()[pos + 1].kind == Grammar::Kind::end ? parent : intern(pos + 1, parent);
  }

  const Grammar& g_;
  bool overflow_ = false;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> ids_;
};

std::string key_of(const GrammarState& s) {
  std::string k;
  for (const auto& stack : s) {
    for (uint32_t p : stack) k.append(reinterpret_cast<const char*>(&p), sizeof p);
    k += '\xff';
    k += '\xff';
    k += '\xff';
    k += '\xff';
  }
  return k;
}

}  // namespace

std::shared_ptr<const TokenVocab> TokenVocab::create(const Tokenizer& tok) {
  auto v = std::make_shared<TokenVocab>();
  const size_t n = tok.vocab_size();
  v->pieces_.resize(n);
  std::vector<std::map<uint8_t, uint32_t>> kids(1);
  v->node_tokens.resize(1);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    if (tok.is_end_of_generation(id)) v->ends_.push_back(id);
    if (tok.is_special(id)) continue;
    std::string piece = tok.token_to_piece(id, DecodeOptions{.render_special = false});
    if (piece.empty()) continue;
    uint32_t node = 0;
    for (char c : piece) {
      const auto b = static_cast<uint8_t>(c);
      auto it = kids[node].find(b);
      if (it == kids[node].end()) {
        it = kids[node].emplace(b, static_cast<uint32_t>(kids.size())).first;
        kids.emplace_back();
        v->node_tokens.emplace_back();
      }
      node = it->second;
    }
    v->node_tokens[node].push_back(id);
    v->pieces_[i] = std::move(piece);
  }
  v->first.reserve(kids.size() + 1);
  for (const auto& k : kids) {
    v->first.push_back(static_cast<uint32_t>(v->edge_byte.size()));
    for (const auto& [b, child] : k) {
      v->edge_byte.push_back(b);
      v->edge_node.push_back(child);
    }
  }
  v->first.push_back(static_cast<uint32_t>(v->edge_byte.size()));
  return v;
}

bool TokenVocab::is_end(TokenId t) const {
  return std::find(ends_.begin(), ends_.end(), t) != ends_.end();
}

std::shared_ptr<const TokenGrammar> TokenGrammar::create(Grammar g, std::shared_ptr<const TokenVocab> vocab) {
  auto t = std::shared_ptr<TokenGrammar>(new TokenGrammar());
  t->g_ = std::move(g);
  t->vocab_ = std::move(vocab);
  return t;
}

std::shared_ptr<const TokenGrammar> TokenGrammar::create(Grammar g, const Tokenizer& tok) {
  return create(std::move(g), TokenVocab::create(tok));
}

GrammarState TokenGrammar::start() const {
  Walker w(g_);
  std::vector<int32_t> ids;
  for (uint32_t a : g_.alts(g_.root()))
    w.expand(g_.elems()[a].kind == Grammar::Kind::end ? -1 : w.intern(a, -1), ids);
  Walker::normalize(ids);
  return w.store(ids);
}

GrammarState TokenGrammar::advance(const GrammarState& s, std::string_view bytes) const {
  Walker w(g_);
  std::vector<int32_t> cur = w.load(s), nxt;
  for (char c : bytes) {
    w.advance(cur, static_cast<uint8_t>(c), nxt);
    if (nxt.empty()) return {};
    cur.swap(nxt);
  }
  return w.store(cur);
}

bool TokenGrammar::whole(const GrammarState& s) {
  return std::any_of(s.begin(), s.end(), [](const auto& stack) { return stack.empty(); });
}

std::shared_ptr<const TokenMask> TokenGrammar::mask(const GrammarState& s) const {
  const std::string key = key_of(s);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++looked_up_;
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  auto m = compute(s);
  std::lock_guard<std::mutex> lock(mu_);
  ++computed_;
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  cache_.emplace(key, m);
  return m;
}

int64_t TokenGrammar::n_masks_computed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return computed_;
}

int64_t TokenGrammar::n_masks_looked_up() const {
  std::lock_guard<std::mutex> lock(mu_);
  return looked_up_;
}

// Depth-first over the trie, one state per level: a node whose prefix no stack accepts is cut
// with its subtree; the tokens of every node reached are allowed.
std::shared_ptr<const TokenMask> TokenGrammar::compute(const GrammarState& s) const {
  const TokenVocab& v = *vocab_;
  auto m = std::make_shared<TokenMask>();
  m->bits.assign((v.size() + 63) / 64, 0);
  auto allow = [&](TokenId t) {
    uint64_t& word = m->bits[static_cast<size_t>(t) / 64];
    const uint64_t bit = uint64_t{1} << (t % 64);
    if (!(word & bit)) ++m->count;
    word |= bit;
  };
  if (whole(s))
    for (TokenId t : v.ends()) allow(t);
  Walker w(g_);
  std::vector<std::vector<int32_t>> level(1, w.load(s));
  struct Pos {
    uint32_t node, edge;
  };
  std::vector<Pos> path{{0, v.first[0]}};
  while (!path.empty()) {
    Pos& p = path.back();
    if (p.edge == v.first[p.node + 1]) {
      path.pop_back();
      continue;
    }
    const uint32_t e = p.edge++;
    const size_t depth = path.size();
    if (level.size() <= depth) level.emplace_back();
    w.advance(level[depth - 1], v.edge_byte[e], level[depth]);
    if (level[depth].empty()) continue;
    const uint32_t child = v.edge_node[e];
    for (TokenId t : v.node_tokens[child]) allow(t);
    path.push_back({child, v.first[child]});
  }
  return m;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const TokenGrammar> g)
    : g_(std::move(g)), state_(g_->start()) {}

bool GrammarMatcher::accept(TokenId t) {
  if (ended_) return false;
  const TokenVocab& v = g_->vocab();
  if (v.is_end(t)) {
    if (!whole()) return false;
    ended_ = true;
    return true;
  }
  if (t < 0 || static_cast<size_t>(t) >= v.size() || v.bytes(t).empty()) return false;
  return accept_bytes(v.bytes(t));
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (ended_) return false;
  GrammarState next = g_->advance(state_, bytes);
  if (next.empty()) return false;
  state_ = std::move(next);
  return true;
}

}  // namespace chorus
