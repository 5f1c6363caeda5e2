// SentencePiece ("llama") vocabularies: Llama 2, Mistral, Gemma. The algorithm is llama.cpp's
// (llm_tokenizer_spm_session in llama-vocab.cpp, read for the facts), so the ids are the same:
//   1. spaces become U+2581 ("▁"), and one is prefixed where encode() says so;
//   2. the text is cut into characters by the length its lead byte announces (no validation:
//      invalid UTF-8 stays as raw bytes);
//   3. the adjacent pair whose concatenation is a token of the highest score merges, the
//      leftmost on ties, until no pair is a token;
//   4. each piece is its token, or, if it is a single character that is no token, the tokens of
//      its bytes (<0xXX>; a byte with no such token gives <unk>, where llama.cpp throws).
#include <algorithm>
#include <queue>

#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus {
namespace {

constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581

// llama.cpp's unicode_len_utf8: the sequence length a byte announces, by its top four bits
// (continuation bytes count as 1, F8..FF as 4).
size_t announced_length(unsigned char c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

}  // namespace

// Scores, the byte tokens and add_space_prefix.
Status Tokenizer::read_spm(const GgufFile& g) {
  const size_t n = tokens_.size();
  scores_.assign(n, 0.0f);
  if (g.find("tokenizer.ggml.scores")) {
    const GgufArray* a = nullptr;
    if (auto f = g.get_array("tokenizer.ggml.scores", GgufValueType::f32))
      a = *f;
    else if (auto i = g.get_array("tokenizer.ggml.scores", GgufValueType::i32))
      a = *i;
    else
      return make_error(Errc::bad_format, g.name() + ": tokenizer.ggml.scores is not an array of f32 or i32");
    if (a->count < n)
      return make_error(Errc::bad_format, g.name() + ": tokenizer.ggml.scores has " +
                                              std::to_string(a->count) + " entries for " + std::to_string(n) +
                                              " tokens");
    for (size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>(a->float_at(i));
  }
  add_space_prefix_ = true;
  if (g.find("tokenizer.ggml.add_space_prefix")) {
    const auto b = g.get_bool("tokenizer.ggml.add_space_prefix");
    if (!b) return b.error();
    add_space_prefix_ = *b;
  }
  // A byte's token is <0xXX> (upper-case hex), else the one-byte text itself.
  byte_token_.assign(256, -1);
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    const char raw = static_cast<char>(b);
    if (auto id = find_token(std::string_view(name, 6)))
      byte_token_[b] = *id;
    else if (auto one = find_token(std::string_view(&raw, 1)))
      byte_token_[b] = *one;
  }
  return Status::success();
}

std::string Tokenizer::spm_unescape(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpaceMark.size()) == kSpaceMark) {
      out += ' ';
      i += kSpaceMark.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

void Tokenizer::spm_bytes(std::string_view piece, std::vector<TokenId>* out) const {
  for (char c : piece) {
    const TokenId id = byte_token_[static_cast<unsigned char>(c)];
    if (id >= 0)
      out->push_back(id);
    else if (unk_)
      out->push_back(*unk_);
  }
}

void Tokenizer::spm_text(std::string_view raw, bool space_prefix, std::vector<TokenId>* out) const {
  std::string text;
  text.reserve(raw.size() + 8);
  if (space_prefix) text += kSpaceMark;
  for (char c : raw) {
    if (c == ' ')
      text += kSpaceMark;
    else
      text += c;
  }
  if (text.empty()) return;

  struct Symbol {
    int prev, next;
    size_t begin, len;  // byte range in `text`; len 0 once merged into its left neighbour
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < text.size();) {
    const size_t len = std::min(announced_length(static_cast<unsigned char>(text[i])), text.size() - i);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, len});
    i += len;
  }
  sym.back().next = -1;

  struct Bigram {
    float score;
    int left, right;
    size_t len;  // byte length of the merged text when queued (detects stale entries)
    // The queue's top is the highest score, then the leftmost pair.
    bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
  };
  std::priority_queue<Bigram> queue;
  auto push = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = sym[left].len + sym[right].len;
    if (auto id = find_token(std::string_view(text).substr(sym[left].begin, len)))
      queue.push({scores_[static_cast<size_t>(*id)], left, right, len});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) push(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // a side changed since queued
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    push(l.prev, b.left);
    push(b.left, l.next);
  }

  // Every merged piece is a token (a pair merges only if it is one); what is left is a single
  // character that is not. (llama.cpp's rev_merge lookup can therefore never apply.)
  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = std::string_view(text).substr(sym[i].begin, sym[i].len);
    if (auto id = find_token(piece))
      out->push_back(*id);
    else
      spm_bytes(piece, out);
  }
}

}  // namespace chorus
