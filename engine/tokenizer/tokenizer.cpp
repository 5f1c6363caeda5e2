#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <queue>

#include "engine/model/gguf.h"
#include "engine/tokenizer/unicode.h"

namespace chorus {
namespace {

// Token texts llama.cpp (0.3.36's, llama-vocab.cpp) treats as control tokens that end a
// generation, whatever their type in the file.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",  // <｜end▁of▁sentence｜>
    "[e~[",
};

std::optional<TokenId> optional_id(const GgufFile& g, std::string_view key, size_t n_vocab, Error* err,
                                   std::optional<TokenId> absent = std::nullopt) {
  if (g.find(key) == nullptr) return absent;
  const auto v = g.get_int(key);
  if (!v) {
    *err = v.error();
    return std::nullopt;
  }
  if (*v < 0 || static_cast<uint64_t>(*v) >= n_vocab) {
    if (*v == -1) return std::nullopt;  // some converters write -1 for "none"
    *err = make_error(Errc::bad_format,
                      g.name() + ": metadata '" + std::string(key) + "' = " + std::to_string(*v) +
                          " is not a token id (vocabulary has " + std::to_string(n_vocab) + ")");
  }
  return static_cast<TokenId>(*v);
}

}  // namespace

// The vocabulary and each token's type.
Status Tokenizer::read_vocab(const GgufFile& g) {
  const auto tokens = g.get_array("tokenizer.ggml.tokens", GgufValueType::string);
  if (!tokens) return tokens.error();
  const size_t n = (*tokens)->count;
  if (n == 0) return make_error(Errc::bad_format, g.name() + ": the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX))
    return make_error(Errc::out_of_range, g.name() + ": vocabulary of " + std::to_string(n) + " tokens");
  tokens_.assign((*tokens)->strings.begin(), (*tokens)->strings.end());
  types_.assign(n, TokenType::token_normal);
  if (g.find("tokenizer.ggml.token_type")) {
    const auto types = g.get_array("tokenizer.ggml.token_type", GgufValueType::i32);
    if (!types) return types.error();
    if ((*types)->count != n)
      return make_error(Errc::bad_format, g.name() + ": tokenizer.ggml.token_type has " +
                                              std::to_string((*types)->count) + " entries for " +
                                              std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      const int64_t ty = (*types)->int_at(i);
      types_[i] = (ty >= 0 && ty <= 6) ? static_cast<TokenType>(ty) : TokenType::token_undefined;
    }
  }
  token_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_id_[tokens_[i]] = static_cast<TokenId>(i);  // last wins

  return Status::success();
}

// The BPE merges, by rank.
Status Tokenizer::read_merges(const GgufFile& g) {
  const auto merges = g.get_array("tokenizer.ggml.merges", GgufValueType::string);
  if (!merges) return merges.error();
  merge_rank_.reserve((*merges)->count);
  for (size_t i = 0; i < (*merges)->count; ++i) {
    const std::string_view m = (*merges)->strings[i];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string_view::npos)
      return make_error(Errc::bad_format, g.name() + ": tokenizer.ggml.merges[" + std::to_string(i) +
                                              "] has no space separating the pair");
    merge_rank_.emplace(std::string(m), static_cast<int32_t>(i));  // first rank wins
  }

  return Status::success();
}

// End of generation, BOS and EOS, and whether encode() adds them.
Status Tokenizer::read_special_ids(const GgufFile& g, PreTokenizerKind kind) {
  const size_t n = tokens_.size();
  for (std::string_view text : kEndOfGenerationTexts) {
    if (auto id = find_token(text)) {
      types_[*id] = TokenType::token_control;
      end_of_generation_.push_back(*id);
    }
  }
  // llama.cpp's exceptions, by the same texts: gpt-oss's channel tokens always render; where
  // <|return|> and <|call|> (or <|calls|> and <|flush|>) end a turn, <|end|> does not; where
  // <|tool_response> does, </s> is an ordinary token.
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (auto id = find_token(text)) types_[*id] = TokenType::token_user_defined;
  auto unmark = [&](std::string_view text, TokenType type) {
    const auto id = find_token(text);
    if (!id) return;
    std::erase(end_of_generation_, *id);
    types_[*id] = type;
  };
  auto has = [&](std::string_view text) { return find_token(text).has_value(); };
  if ((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")))
    unmark("<|end|>", TokenType::token_user_defined);
  if (has("<|tool_response>")) unmark("</s>", TokenType::token_normal);

  // SentencePiece vocabularies have llama.cpp's defaults where a key is absent: <unk> 0, <s> 1,
  // </s> 2, BOS added.
  const bool spm = model_ == TokenizerModel::spm;
  auto fallback = [&](TokenId id) {
    return spm && static_cast<size_t>(id) < n ? std::optional(id) : std::nullopt;
  };
  Error err{Errc::ok, {}};
  bos_ = optional_id(g, "tokenizer.ggml.bos_token_id", n, &err, fallback(1));
  if (err.code == Errc::ok) eos_ = optional_id(g, "tokenizer.ggml.eos_token_id", n, &err, fallback(2));
  if (err.code == Errc::ok) unk_ = optional_id(g, "tokenizer.ggml.unknown_token_id", n, &err, fallback(0));
  if (err.code != Errc::ok) return err;
  if (eos_) end_of_generation_.push_back(*eos_);
  add_bos_ = spm || kind == PreTokenizerKind::pre_llama3;
  if (g.find("tokenizer.ggml.add_bos_token")) {
    const auto b = g.get_bool("tokenizer.ggml.add_bos_token");
    if (!b) return b.error();
    add_bos_ = *b;
  }
  if (g.find("tokenizer.ggml.add_eos_token")) {
    const auto b = g.get_bool("tokenizer.ggml.add_eos_token");
    if (!b) return b.error();
    add_eos_ = *b;
  }
  if (add_bos_ && !bos_)
    return make_error(Errc::bad_format, g.name() + ": add_bos_token is set but bos_token_id is missing");
  if (add_eos_ && !eos_)
    return make_error(Errc::bad_format, g.name() + ": add_eos_token is set but eos_token_id is missing");
  return Status::success();
}

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& g, std::optional<std::string_view> pre_override) {
  const auto model = g.get_string("tokenizer.ggml.model");
  if (!model) return model.error();
  if (*model != "gpt2" && *model != "llama")
    return make_error(Errc::unsupported,
                      g.name() + ": tokenizer model '" + std::string(*model) +
                          "' is not supported (chorus supports 'gpt2', byte-level BPE, and "
                          "'llama', SentencePiece)");
  const bool spm = *model == "llama";
  std::string_view pre_name;
  if (spm) {
    // llama.cpp gives SentencePiece vocabularies no pre-tokenizer, whatever the file says.
  } else if (pre_override) {
    pre_name = *pre_override;
  } else if (g.find("tokenizer.ggml.pre")) {
    const auto p = g.get_string("tokenizer.ggml.pre");
    if (!p) return p.error();
    pre_name = *p;
  }
  const auto kind = pre_tokenizer_from_name(pre_name);
  if (!kind) return make_error(kind.error().code, g.name() + ": " + kind.error().message);
  auto pre = PreTokenizer::create(*kind);
  if (!pre) return pre.error();

  Tokenizer t(std::move(*pre));
  t.model_ = spm ? TokenizerModel::spm : TokenizerModel::bpe;
  CHORUS_TRY(t.read_vocab(g));
  CHORUS_TRY(spm ? t.read_spm(g) : t.read_merges(g));
  CHORUS_TRY(t.read_special_ids(g, *kind));
  t.ignore_merges_ = !spm && *kind == PreTokenizerKind::pre_llama3;

  for (size_t i = 0; i < t.tokens_.size(); ++i)
    if (t.is_special(static_cast<TokenId>(i)) && !t.tokens_[i].empty())
      t.specials_.push_back(static_cast<TokenId>(i));
  std::stable_sort(t.specials_.begin(), t.specials_.end(),
                   [&](TokenId a, TokenId b) { return t.tokens_[a].size() > t.tokens_[b].size(); });
  return t;
}

std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
  const auto it = token_id_.find(text);
  if (it == token_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(TokenId id) const {
  const TokenType ty = types_[static_cast<size_t>(id)];
  return ty == TokenType::token_control || ty == TokenType::token_user_defined ||
         ty == TokenType::token_unknown;
}

bool Tokenizer::is_end_of_generation(TokenId id) const {
  return std::find(end_of_generation_.begin(), end_of_generation_.end(), id) != end_of_generation_.end();
}

// Merges one byte-level word: repeatedly joins the adjacent pair of lowest merge rank
// (leftmost on ties), then maps each symbol to its id.
void Tokenizer::bpe_word(const std::string& word, std::vector<TokenId>* out) const {
  if (ignore_merges_) {
    if (auto id = find_token(word)) {
      out->push_back(*id);
      return;
    }
  }
  struct Symbol {
    int prev, next;
    size_t begin, len;  // byte range in `word`
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < word.size();) {
    size_t len = static_cast<size_t>(unicode::utf8_sequence_length(static_cast<unsigned char>(word[i])));
    if (len == 0) len = 1;
    len = std::min(len, word.size() - i);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, len});
    i += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Bigram {
    int32_t rank;
    int left;
    size_t len;  // byte length of the merged text when queued (detects stale entries)
    bool operator>(const Bigram& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
  };
  std::priority_queue<Bigram, std::vector<Bigram>, std::greater<>> queue;
  std::string key;
  auto push = [&](int left) {
    if (left < 0) return;
    const int right = sym[left].next;
    if (right < 0) return;
    key.assign(word, sym[left].begin, sym[left].len);
    key += ' ';
    key.append(word, sym[right].begin, sym[right].len);
    const auto it = merge_rank_.find(key);
    if (it != merge_rank_.end()) queue.push({it->second, left, sym[left].len + sym[right].len});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push(i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = sym[l.next];
    if (r.len == 0 || l.len + r.len != b.len) continue;  // stale: a side changed since queued
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    push(l.prev);
    push(b.left);
  }

  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string_view text(word.data() + sym[i].begin, sym[i].len);
    if (auto id = find_token(text)) {
      out->push_back(*id);
      continue;
    }
    for (char c : text)  // llama.cpp's fallback: single bytes that are tokens; others dropped
      if (auto id = find_token(std::string_view(&c, 1))) out->push_back(*id);
  }
}

void Tokenizer::encode_text(std::string_view text, std::vector<TokenId>* out) const {
  if (text.empty()) return;
  for (const std::string& word : pre_.split(unicode::decode_utf8_lossy(text)))
    bpe_word(unicode::byte_level_encode(word), out);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, EncodeOptions opts) const {
  // Fragments of the input: raw text ranges, or a special token already matched.
  struct Fragment {
    size_t begin, len;
    TokenId token;  // -1 for raw text
  };
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({0, text.size(), -1});
  for (TokenId sp : specials_) {
    if (!opts.parse_special && types_[sp] != TokenType::token_user_defined) continue;
    const std::string_view st = tokens_[sp];
    std::vector<Fragment> next;
    next.reserve(frags.size());
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.begin, f.len);
      size_t at = 0;
      for (size_t hit; (hit = raw.find(st, at)) != std::string_view::npos; at = hit + st.size()) {
        if (hit > at) next.push_back({f.begin + at, hit - at, -1});
        next.push_back({f.begin + hit, st.size(), sp});
      }
      if (at < raw.size()) next.push_back({f.begin + at, raw.size() - at, -1});
    }
    frags = std::move(next);
  }

  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (opts.add_special && add_bos_) out.push_back(*bos_);
  // SPM prefixes a space to the first text and to text after a special token, as llama.cpp does.
  bool after_special = true;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else if (model_ == TokenizerModel::spm) {
      spm_text(text.substr(f.begin, f.len), add_space_prefix_ && after_special, &out);
    } else {
      encode_text(text.substr(f.begin, f.len), &out);
    }
    after_special = f.token >= 0;
  }
  if (opts.add_special && add_eos_) out.push_back(*eos_);
  return out;
}

std::string Tokenizer::token_to_piece(TokenId id, DecodeOptions opts) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return {};
  const std::string& text = tokens_[static_cast<size_t>(id)];
  switch (types_[static_cast<size_t>(id)]) {
    case TokenType::token_normal: {
      std::string out;
      if (model_ == TokenizerModel::spm) return spm_unescape(text);
      if (!unicode::byte_level_decode(text, &out)) return text;  // not byte-level: keep as is
      return out;
    }
    case TokenType::token_control:
    case TokenType::token_unknown: return opts.render_special ? text : std::string();
    case TokenType::token_user_defined: return text;
    case TokenType::token_byte: {
      // "<0xAB>"
      auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
      };
      if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>' && hex(text[3]) >= 0 &&
          hex(text[4]) >= 0)
        return std::string(1, static_cast<char>(hex(text[3]) * 16 + hex(text[4])));
      return text;
    }
    default: return {};
  }
}

std::string Tokenizer::decode(std::span<const TokenId> ids, DecodeOptions opts) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], opts);
    // llama.cpp's detokenizer drops one leading space of the first token's piece, the space the
    // encoder prefixed (only of the first: after a BOS that renders as nothing, none is dropped).
    if (i == 0 && add_space_prefix_ && piece.starts_with(' ')) piece.erase(0, 1);
    out += piece;
  }
  return out;
}

}  // namespace chorus
