#include "engine/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "engine/tokenizer/unicode.h"

namespace chorus {
namespace {

// llama.cpp's whitespace set (its own Unicode tables), spelled out because PCRE2's \s also
// matches U+180E. Used inside character classes: "[" WS "]" is \s, "[^" WS "]" is \S.
#define WS \
  "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// GPT-2's word pattern. The trailing "|[WS]+" mirrors llama.cpp's hand-written splitter,
// which gives leftover whitespace a piece of its own.
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";

constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";

#undef WS

std::vector<const char*> patterns_for(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::pre_default:
      return {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"};
    case PreTokenizerKind::pre_gpt2: return {kGpt2};
    case PreTokenizerKind::pre_llama3: return {kLlama3};
    case PreTokenizerKind::pre_qwen2: return {kQwen2};
    case PreTokenizerKind::pre_smollm: return {"\\p{N}", kGpt2};
  }
  return {};
}

struct NameKind {
  std::string_view name;
  PreTokenizerKind kind;
};

constexpr NameKind kNames[] = {
    {"default", PreTokenizerKind::pre_default},
    {"gpt-2", PreTokenizerKind::pre_gpt2},
    {"gpt2", PreTokenizerKind::pre_gpt2},
    {"phi-2", PreTokenizerKind::pre_gpt2},
    {"llama3", PreTokenizerKind::pre_llama3},
    {"llama-bpe", PreTokenizerKind::pre_llama3},
    {"llama-v3", PreTokenizerKind::pre_llama3},
    {"falcon3", PreTokenizerKind::pre_llama3},
    {"pixtral", PreTokenizerKind::pre_llama3},
    {"qwen2", PreTokenizerKind::pre_qwen2},
    {"deepseek-r1-qwen", PreTokenizerKind::pre_qwen2},
    {"megrez", PreTokenizerKind::pre_qwen2},
    {"smollm", PreTokenizerKind::pre_smollm},
};

// PCRE2 cannot match surrogate code points in UTF-8 mode. They are neither letters, numbers
// nor spaces, like the private-use U+E000 that stands in for them while matching.
uint32_t regex_safe(uint32_t cp) {
  return (cp >= 0xD800 && cp <= 0xDFFF) ? 0xE000 : cp;
}

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(PreTokenizerKind kind) : kind_(kind) {}
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name) {
  if (name.empty()) return PreTokenizerKind::pre_default;
  for (const auto& nk : kNames)
    if (nk.name == name) return nk.kind;
  std::string valid;
  for (const auto& nk : kNames) valid += (valid.empty() ? "" : ", ") + std::string(nk.name);
  return make_error(Errc::unsupported,
                    "pre-tokenizer '" + std::string(name) + "' is not supported (supported: " + valid + ")");
}

std::string_view pre_tokenizer_name(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::pre_default: return "default";
    case PreTokenizerKind::pre_gpt2: return "gpt-2";
    case PreTokenizerKind::pre_llama3: return "llama3";
    case PreTokenizerKind::pre_qwen2: return "qwen2";
    case PreTokenizerKind::pre_smollm: return "smollm";
  }
  return "?";
}

Result<PreTokenizer> PreTokenizer::create(PreTokenizerKind kind) {
  PreTokenizer pt(kind);
  for (const char* pattern : patterns_for(kind)) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto c = std::make_unique<Compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (c->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return make_error(Errc::internal, "pre-tokenizer regex failed to compile at " +
                                            std::to_string(err_off) + ": " +
                                            reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT fails
    pt.regexes_.push_back(std::move(c));
  }
  return pt;
}

std::vector<std::string> PreTokenizer::split(const std::vector<uint32_t>& cpts) const {
  // Matching runs on a UTF-8 subject; byte_of[i] is where code point i starts in it.
  std::string subject;
  subject.reserve(cpts.size() + 8);
  std::vector<size_t> byte_of(cpts.size() + 1);
  for (size_t i = 0; i < cpts.size(); ++i) {
    byte_of[i] = subject.size();
    unicode::append_utf8(subject, regex_safe(cpts[i]));
  }
  byte_of[cpts.size()] = subject.size();
  auto cpt_at = [&](size_t byte) {  // byte offsets from PCRE2 always fall on code points
    return static_cast<size_t>(std::lower_bound(byte_of.begin(), byte_of.end(), byte) - byte_of.begin());
  };

  struct Piece {
    size_t begin, end;  // code point range
  };
  std::vector<Piece> pieces;
  if (!cpts.empty()) pieces.push_back({0, cpts.size()});
  pcre2_match_data* md = nullptr;
  for (const auto& re : regexes_) {
    if (md == nullptr) md = pcre2_match_data_create(1, nullptr);
    std::vector<Piece> next;
    next.reserve(pieces.size() * 2);
    for (const Piece& piece : pieces) {
      const size_t base = byte_of[piece.begin];
      const size_t len = byte_of[piece.end] - base;
      const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data() + base);
      size_t at = 0;  // byte offset within the piece
      while (at < len) {
        const int rc = pcre2_match(re->code, s, len, at, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t mb = ov[0], me = ov[1];
        if (me == mb) {  // an empty match: step over one code point
          ++me;
          while (me < len && (subject[base + me] & 0xC0) == 0x80) ++me;
          mb = me;
        }
        if (mb > at) next.push_back({cpt_at(base + at), cpt_at(base + mb)});
        if (me > mb) next.push_back({cpt_at(base + mb), cpt_at(base + me)});
        at = me;
      }
      if (at < len) next.push_back({cpt_at(base + at), piece.end});
    }
    pieces = std::move(next);
  }
  if (md != nullptr) pcre2_match_data_free(md);

  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (const Piece& p : pieces) {
    std::string w;
    for (size_t i = p.begin; i < p.end; ++i) unicode::append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace chorus
