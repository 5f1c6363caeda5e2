// The pre-tokenizer splits text into words before BPE, with the regexes llama.cpp uses for
// the GGUF key `tokenizer.ggml.pre` (PCRE2, Unicode properties, JIT-compiled).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace chorus {

enum class PreTokenizerKind {
  pre_default,  // "default" or missing: punctuation runs, GPT-2 words, digit groups
  pre_gpt2,     // "gpt-2" (also accepted: "gpt2", "phi-2")
  pre_llama3,   // "llama3", "llama-bpe", "llama-v3", "falcon3", "pixtral"; digits in 1-3 groups
  pre_qwen2,    // "qwen2", "deepseek-r1-qwen", "megrez"; single digits
  pre_smollm,   // "smollm": single digits, then GPT-2 words
};

// Maps a `tokenizer.ggml.pre` value to a kind. An empty name is the default kind.
// Errors: Errc::unsupported naming the value and listing the accepted names.
Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name);
std::string_view pre_tokenizer_name(PreTokenizerKind kind);

class PreTokenizer {
 public:
  static Result<PreTokenizer> create(PreTokenizerKind kind);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  PreTokenizerKind kind() const { return kind_; }

  // Splits code points (as decoded by unicode::decode_utf8_lossy) into words, each returned
  // as UTF-8. Each regex in turn re-splits the pieces of the previous one; text between
  // matches is kept as a piece of its own, so the words concatenate back to the input.
  // Thread-safe.
  std::vector<std::string> split(const std::vector<uint32_t>& cpts) const;

 private:
  struct Compiled;
  explicit PreTokenizer(PreTokenizerKind kind);
  PreTokenizerKind kind_;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace chorus
