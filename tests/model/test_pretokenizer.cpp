// The pre-tokenizer's splits against an independent regex engine: the Python `regex` package
// running llama.cpp's patterns with llama.cpp's whitespace set
// (tests/goldens/pretokenizer_splits.json, written by
// tools/goldens/make_pretokenizer_goldens.py). The token-id goldens barely exercise the
// splitting with the SmolLM2 vocabulary; these compare the word lists themselves.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

const std::vector<std::string> kKinds = {"gpt-2", "llama3", "qwen2", "smollm", "default"};

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      static const char* d = "0123456789abcdef";
      out += "\\x";
      out += d[c >> 4];
      out += d[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string pieces_str(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + quoted(v[i]);
  return s + "]";
}

PreTokenizer make(const std::string& name) {
  auto kind = pre_tokenizer_from_name(name);
  EXPECT_TRUE(kind.ok()) << kind.error().to_string();
  auto pt = PreTokenizer::create(*kind);
  EXPECT_TRUE(pt.ok()) << pt.error().to_string();
  return std::move(pt.value());
}

class PreTokenizerSplits : public ::testing::TestWithParam<std::string> {};

TEST_P(PreTokenizerSplits, MatchPythonRegexOracle) {
  const auto golden = test::load_golden("pretokenizer_splits.json");
  ASSERT_TRUE(golden.has_value()) << "missing goldens: pretokenizer_splits.json";
  const std::string kind = GetParam();
  ASSERT_TRUE((*golden)["kinds"].contains(kind)) << "no goldens for " << kind;
  const PreTokenizer pt = make(kind);
  size_t n = 0, mismatches = 0;
  for (const auto& c : (*golden)["kinds"][kind]) {
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["pieces"].get<std::vector<std::string>>();
    const auto got = pt.split(unicode::decode_utf8_lossy(text));
    ++n;
    if (got != expected && ++mismatches <= 5) {
      ADD_FAILURE() << kind << ": split of " << quoted(text) << "\n  chorus: " << pieces_str(got)
                    << "\n  oracle: " << pieces_str(expected);
    }
  }
  EXPECT_EQ(mismatches, 0u) << kind << ": " << mismatches << " of " << n << " inputs split differently";
  EXPECT_GT(n, 300u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, PreTokenizerSplits, ::testing::ValuesIn(kKinds), [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
});

// Every corpus entry, invalid UTF-8 included: the words concatenate back to the decoded input
// (invalid bytes as U+FFFD, overlong forms and surrogates as the values they encode).
TEST(PreTokenizerRoundTrip, PiecesConcatenateToInput) {
  std::ifstream in(test::goldens_dir() + "/../../tools/goldens/tokenizer_corpus.json");
  ASSERT_TRUE(in) << "missing tools/goldens/tokenizer_corpus.json";
  const auto corpus = nlohmann::json::parse(in);
  std::vector<std::string> texts;
  for (const auto& e : corpus)
    texts.push_back(e.is_string() ? e.get<std::string>() : test::from_hex(e["hex"]));
  ASSERT_GT(texts.size(), 300u);
  for (const std::string& name : kKinds) {
    const PreTokenizer pt = make(name);
    for (const std::string& text : texts) {
      const auto cpts = unicode::decode_utf8_lossy(text);
      std::string expected;
      for (uint32_t cp : cpts) unicode::append_utf8(expected, cp);
      std::string joined;
      const auto words = pt.split(cpts);
      for (const auto& w : words) {
        EXPECT_FALSE(w.empty()) << name << ": empty piece in " << quoted(text);
        joined += w;
      }
      EXPECT_EQ(joined, expected) << name << ": pieces of " << quoted(text) << " = " << pieces_str(words);
    }
  }
}

}  // namespace
}  // namespace chorus
