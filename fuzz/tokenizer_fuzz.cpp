// libFuzzer target for the tokenizers: arbitrary bytes as text, encoded by a byte-level BPE
// vocabulary (tiny_llama.gguf) and two SentencePiece ones (tiny_spm_llama2.gguf: space prefix,
// tiny_spm_gemma.gguf: user-defined tokens), with and without special-token parsing, then
// decoded. Never a crash, UB or an out-of-range id; SentencePiece gives the input's bytes back
// (with U+2581 read as a space), BPE the input with each invalid UTF-8 byte as U+FFFD.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace {

struct Vocab {
  std::unique_ptr<chorus::GgufFile> file;
  std::unique_ptr<chorus::Tokenizer> tok;
};

std::vector<Vocab> load() {
  std::vector<Vocab> out;
  for (const char* name : {"tiny_llama.gguf", "tiny_spm_llama2.gguf", "tiny_spm_gemma.gguf"}) {
    auto g = chorus::GgufFile::open(std::string(CHORUS_GOLDENS_DIR) + "/" + name);
    if (!g.ok()) std::abort();
    Vocab v{std::make_unique<chorus::GgufFile>(std::move(*g)), nullptr};
    auto t = chorus::Tokenizer::from_gguf(*v.file);
    if (!t.ok()) std::abort();
    v.tok = std::make_unique<chorus::Tokenizer>(std::move(*t));
    out.push_back(std::move(v));
  }
  return out;
}

std::string spaces_for_marks(std::string s) {
  for (size_t at; (at = s.find("\xe2\x96\x81")) != std::string::npos;) s.replace(at, 3, " ");
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Vocab> vocabs = load();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const Vocab& v : vocabs) {
    const chorus::Tokenizer& tok = *v.tok;
    for (bool special : {false, true}) {
      const auto ids = tok.encode(text, {.add_special = special, .parse_special = special});
      for (chorus::TokenId id : ids)
        if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) std::abort();
      const std::string back = tok.decode(ids);
      if (special) continue;  // special tokens' texts and an added BOS change the text
      if (tok.model() == chorus::TokenizerModel::spm) {
        if (spaces_for_marks(back) != spaces_for_marks(text)) std::abort();
      } else {
        std::string repaired;
        for (uint32_t cp : chorus::unicode::decode_utf8_lossy(text))
          chorus::unicode::append_utf8(repaired, cp);
        if (back != repaired) std::abort();  // all 256 byte-level tokens are in the vocabulary
      }
    }
  }
  return 0;
}
