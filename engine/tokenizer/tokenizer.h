// The tokenizer of a GGUF vocabulary (tokenizer.ggml.*), token-identical to llama.cpp on the
// same file (tests/goldens/tokenizer_*.json are the oracle). Two models:
//   gpt2   byte-level BPE: the text between special tokens is decoded from UTF-8 (invalid bytes
//          become U+FFFD, see unicode.h), split by the pre-tokenizer, mapped to the byte-level
//          alphabet and merged by BPE rank.
//   llama  SentencePiece (Llama 2, Mistral, Gemma): spaces become U+2581, a leading one is added
//          after BOS or a special token where add_space_prefix says so, and adjacent pieces merge
//          by the vocabulary's scores, highest first; a piece that is no token falls back to its
//          bytes' <0xXX> tokens (tokenizer_spm.cpp).
// encode(): special tokens are split out first (longest first, as llama.cpp does), the rest
// goes to the model.
// decode(): the inverse; decode(encode(s)) == s for every valid UTF-8 string s (for SPM with
// add_space_prefix, the first piece's leading space is dropped, as llama.cpp's detokenizer does).
//
// Thread-safety: immutable after from_gguf(); encode/decode are safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/tokenizer/pretokenizer.h"

namespace chorus {

class GgufFile;

using TokenId = int32_t;

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  token_undefined = 0,
  token_normal = 1,
  token_unknown = 2,
  token_control = 3,
  token_user_defined = 4,
  token_unused = 5,
  token_byte = 6,
};

// tokenizer.ggml.model: "gpt2" or "llama".
enum class TokenizerModel { bpe, spm };

struct EncodeOptions {
  bool add_special = false;    // add BOS/EOS as the vocabulary's add_bos/add_eos flags say
  bool parse_special = false;  // match control tokens (<|im_start|>...) in the text;
                               // user-defined tokens are always matched
};

struct DecodeOptions {
  bool render_special = true;  // print control tokens' text (else they decode to nothing)
};

class Tokenizer {
 public:
  // Builds the tokenizer from `tokenizer.ggml.*` metadata. `pre_override` replaces the
  // file's `tokenizer.ggml.pre` (BPE only). Errors name the key that is missing or malformed,
  // or the tokenizer model that is not supported ("gpt2" and "llama" are).
  static Result<Tokenizer> from_gguf(const GgufFile& gguf,
                                     std::optional<std::string_view> pre_override = std::nullopt);

  std::vector<TokenId> encode(std::string_view text, EncodeOptions opts = {}) const;
  // The text of `ids`; for SPM with add_space_prefix, without the first piece's leading space.
  std::string decode(std::span<const TokenId> ids, DecodeOptions opts = {}) const;
  // The bytes one token contributes to decoded text (as streamed: no space is dropped). An
  // out-of-range id gives "".
  std::string token_to_piece(TokenId id, DecodeOptions opts = {}) const;

  size_t vocab_size() const { return tokens_.size(); }
  std::string_view token_text(TokenId id) const { return tokens_.at(static_cast<size_t>(id)); }
  TokenType token_type(TokenId id) const { return types_.at(static_cast<size_t>(id)); }
  std::optional<TokenId> find_token(std::string_view text) const;
  bool is_special(TokenId id) const;  // control, user-defined or unknown
  bool is_end_of_generation(TokenId id) const;

  std::optional<TokenId> bos() const { return bos_; }
  std::optional<TokenId> eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  TokenizerModel model() const { return model_; }
  PreTokenizerKind pre() const { return pre_.kind(); }  // BPE; "default" for SPM
  bool add_space_prefix() const { return add_space_prefix_; }
  std::optional<TokenId> unk() const { return unk_; }
  size_t n_merges() const { return merge_rank_.size(); }
  // Special tokens, longest text first (the order encode() tries them).
  const std::vector<TokenId>& special_tokens() const { return specials_; }

 private:
  Tokenizer(PreTokenizer pre) : pre_(std::move(pre)) {}
  Status read_vocab(const GgufFile& g);  // from_gguf's parts
  Status read_merges(const GgufFile& g);
  Status read_special_ids(const GgufFile& g, PreTokenizerKind kind);
  void bpe_word(const std::string& word, std::vector<TokenId>* out) const;
  void encode_text(std::string_view text, std::vector<TokenId>* out) const;
  // SentencePiece (tokenizer_spm.cpp).
  Status read_spm(const GgufFile& g);
  void spm_text(std::string_view text, bool space_prefix, std::vector<TokenId>* out) const;
  void spm_bytes(std::string_view piece, std::vector<TokenId>* out) const;
  static std::string spm_unescape(std::string_view piece);  // U+2581 back to spaces

  PreTokenizer pre_;
  std::vector<std::string> tokens_;  // byte-level text of each id
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, TokenId> token_id_;  // views into tokens_
  std::unordered_map<std::string, int32_t> merge_rank_;     // "left right" -> rank
  std::vector<TokenId> specials_;
  std::vector<TokenId> end_of_generation_;
  std::optional<TokenId> bos_, eos_, unk_;
  TokenizerModel model_ = TokenizerModel::bpe;
  std::vector<float> scores_;        // SPM: each token's merge score
  std::vector<TokenId> byte_token_;  // SPM: the token of each byte value, or -1
  bool add_space_prefix_ = false;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool ignore_merges_ = false;
};

}  // namespace chorus
