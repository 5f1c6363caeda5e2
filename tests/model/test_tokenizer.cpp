// The tokenizer against llama.cpp: token ids recorded by llama-cpp-python on the same GGUF
// (tests/goldens/tokenizer_<pre>.json, written by tools/goldens/make_tokenizer_goldens.py),
// for every pre-tokenizer, plus round trips and the chat template.
#include <gtest/gtest.h>

#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

std::string hex_of(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

bool valid_utf8(std::string_view s) {
  const auto cps = unicode::decode_utf8_lossy(s);
  std::string back;
  for (uint32_t cp : cps) unicode::append_utf8(back, cp);
  return back == s;
}

std::string ids_str(const std::vector<TokenId>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// A vocabulary of a few tokens with BOS <s> and EOS </s>, for chat templates, which need only
// their text.
const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tok = [] {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "gpt2");
    b.kv_string("tokenizer.ggml.pre", "gpt-2");
    b.kv_strings("tokenizer.ggml.tokens", {"a", "b", "<s>", "</s>"});
    b.kv_i32s("tokenizer.ggml.token_type", {1, 1, 3, 3});
    b.kv_strings("tokenizer.ggml.merges", {});
    b.kv_u32("tokenizer.ggml.bos_token_id", 2);
    b.kv_u32("tokenizer.ggml.eos_token_id", 3);
    const auto bytes = b.build();
    auto g = GgufFile::parse({bytes.data(), bytes.size()}, "tiny.gguf");
    return std::move(*Tokenizer::from_gguf(*g));
  }();
  return tok;
}

class TokenizerGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerGoldens, TokenIdenticalToLlamaCpp) {
  CHORUS_REQUIRE_DEFAULT_MODEL(g);
  const std::string pre = GetParam();
  const auto golden = test::load_golden("tokenizer_" + pre + ".json");
  ASSERT_TRUE(golden.has_value()) << "missing goldens for " << pre;
  auto tok = Tokenizer::from_gguf(*g, (*golden)["pre"].get<std::string>());
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  size_t n = 0, mismatches = 0;
  for (const auto& c : (*golden)["cases"]) {
    const std::string text = test::from_hex(c["hex"]);
    if (c.contains("error")) {
      // llama.cpp aborts on this input (e.g. a code point above U+10FFFF); chorus repairs it
      // (one U+FFFD per bad byte) and must simply not fail.
      std::string repaired;
      for (uint32_t cp : unicode::decode_utf8_lossy(text)) unicode::append_utf8(repaired, cp);
      EXPECT_EQ(tok->decode(tok->encode(text)), repaired);
      continue;
    }
    const auto plain = tok->encode(text, {.add_special = false, .parse_special = false});
    const auto special = tok->encode(text, {.add_special = false, .parse_special = true});
    const auto added = tok->encode(text, {.add_special = true, .parse_special = true});
    const auto want_plain = c["ids"].get<std::vector<TokenId>>();
    const auto want_special = c["ids_special"].get<std::vector<TokenId>>();
    const auto want_added = c["ids_add_special"].get<std::vector<TokenId>>();
    ++n;
    if (plain != want_plain || special != want_special || added != want_added) {
      ++mismatches;
      ADD_FAILURE() << pre << " case " << n - 1 << " hex " << c["hex"].get<std::string>().substr(0, 120)
                    << "\n  plain   got " << ids_str(plain) << "\n          want " << ids_str(want_plain)
                    << "\n  special got " << ids_str(special) << "\n          want " << ids_str(want_special);
    }
  }
  EXPECT_GE(n, 200u);
  EXPECT_EQ(mismatches, 0u) << mismatches << " of " << n << " cases differ";
}

INSTANTIATE_TEST_SUITE_P(PreTokenizers, TokenizerGoldens,
                         ::testing::Values("smollm", "qwen2", "llama3", "gpt2"));

TEST(Tokenizer, RoundTripsEveryCorpusString) {
  CHORUS_REQUIRE_DEFAULT_MODEL(g);
  auto tok = Tokenizer::from_gguf(*g);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  const auto golden = test::load_golden("tokenizer_smollm.json");
  ASSERT_TRUE(golden.has_value());
  for (const auto& c : (*golden)["cases"]) {
    const std::string text = test::from_hex(c["hex"]);
    // Invalid UTF-8 is repaired on the way in (one U+FFFD per bad byte, as llama.cpp does),
    // so the round trip returns the repaired text.
    std::string expected;
    for (uint32_t cp : unicode::decode_utf8_lossy(text)) unicode::append_utf8(expected, cp);
    if (valid_utf8(text)) {
      ASSERT_EQ(expected, text);
    }
    for (bool parse_special : {false, true}) {
      const auto ids = tok->encode(text, {.parse_special = parse_special});
      EXPECT_EQ(tok->decode(ids), expected) << "hex " << hex_of(text) << " parse_special " << parse_special;
      // Streaming gives the same bytes, and never splits a character of valid input.
      IncrementalDecoder stream(*tok);
      std::string streamed;
      for (TokenId id : ids) {
        const std::string piece = stream.push(id);
        if (valid_utf8(expected)) {
          EXPECT_TRUE(valid_utf8(piece)) << "half a character emitted: " << hex_of(piece);
        }
        streamed += piece;
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, expected);
    }
  }
}

TEST(Tokenizer, DefaultModelBasics) {
  CHORUS_REQUIRE_DEFAULT_MODEL(g);
  auto tok = Tokenizer::from_gguf(*g);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->vocab_size(), 49152u);
  EXPECT_EQ(tok->pre(), PreTokenizerKind::pre_smollm);
  const auto im_start = tok->find_token("<|im_start|>");
  ASSERT_TRUE(im_start.has_value());
  EXPECT_TRUE(tok->is_special(*im_start));
  const auto ids = tok->encode("<|im_start|>user", {.parse_special = true});
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], *im_start);
  const auto plain = tok->encode("<|im_start|>user", {.parse_special = false});
  EXPECT_GT(plain.size(), 2u);
  EXPECT_NE(plain[0], *im_start);
  EXPECT_TRUE(tok->is_end_of_generation(*tok->find_token("<|im_end|>")));
  EXPECT_EQ(tok->decode(ids, {.render_special = false}), "user");
}

// SmolLM2's own Jinja template inserts its default system prompt when none is given.
TEST(ChatTemplate, SmolLM2DefaultSystemPrompt) {
  CHORUS_REQUIRE_DEFAULT_MODEL(g);
  auto tok = Tokenizer::from_gguf(*g);
  ASSERT_TRUE(tok.ok());
  auto tmpl = ChatTemplate::from_gguf(*g, *tok);
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().to_string();
  EXPECT_FALSE(tmpl->is_chatml_fallback());
  EXPECT_EQ(
      *tmpl->apply({{"user", "Hi"}}),
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(*tmpl->apply({{"system", "Be brief."}, {"user", "Hi"}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

// Any template is rendered, ChatML or not; one chorus cannot parse is an error naming the key
// and the line, never a silent ChatML.
TEST(ChatTemplate, TheFilesOwnTemplateOrAClearError) {
  test::GgufBuilder b;
  b.kv_string("tokenizer.chat_template", "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}");
  auto bytes = b.build();
  auto g = GgufFile::parse({bytes.data(), bytes.size()}, "mistral.gguf");
  ASSERT_TRUE(g.ok());
  auto t = ChatTemplate::from_gguf(*g, tiny_tokenizer());
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(*t->apply({{"user", "Hi"}, {"assistant", "Hello"}}), "[INST] Hi [/INST][INST] Hello [/INST]");

  test::GgufBuilder bad;
  bad.kv_string("tokenizer.chat_template", "{% for m in messages %}\n{{ m.content | tojsn }}{% endfor %}");
  bytes = bad.build();
  g = GgufFile::parse({bytes.data(), bytes.size()}, "bad.gguf");
  ASSERT_TRUE(g.ok());
  t = ChatTemplate::from_gguf(*g, tiny_tokenizer());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code, Errc::bad_format);
  EXPECT_NE(t.error().message.find("bad.gguf: tokenizer.chat_template, line 2: no filter named 'tojsn'"),
            std::string::npos)
      << t.error().message;

  test::GgufBuilder none;
  bytes = none.build();
  g = GgufFile::parse({bytes.data(), bytes.size()}, "plain.gguf");
  ASSERT_TRUE(g.ok());
  t = ChatTemplate::from_gguf(*g, tiny_tokenizer());
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->is_chatml_fallback());
  EXPECT_EQ(*t->apply({{"user", "Hi"}}), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// A vocabulary small enough to reason about by hand: bytes a, b, c, Ġ plus merges.
Result<GgufFile> tiny_vocab(test::GgufBuilder& b, std::vector<uint8_t>& storage) {
  storage = b.build();
  return GgufFile::parse({storage.data(), storage.size()}, "tiny.gguf");
}

TEST(Tokenizer, MergesByRankLeftmostFirst) {
  test::GgufBuilder b;
  b.kv_string("tokenizer.ggml.model", "gpt2");
  b.kv_string("tokenizer.ggml.pre", "gpt-2");
  b.kv_strings("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "bc", "abc", "aa", "<s>"});
  b.kv_i32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 3});
  b.kv_strings("tokenizer.ggml.merges", {"b c", "a b", "a bc", "a a"});
  b.kv_u32("tokenizer.ggml.bos_token_id", 7);
  b.kv_bool("tokenizer.ggml.add_bos_token", true);
  std::vector<uint8_t> storage;
  auto g = tiny_vocab(b, storage);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  auto tok = Tokenizer::from_gguf(*g);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->encode("abc"), (std::vector<TokenId>{5}));  // b c first, then a bc
  EXPECT_EQ(tok->encode("ab"), (std::vector<TokenId>{3}));
  EXPECT_EQ(tok->encode("aaa"), (std::vector<TokenId>{6, 0}));  // leftmost pair merges first
  EXPECT_EQ(tok->encode("abc", {.add_special = true}), (std::vector<TokenId>{7, 5}));
  EXPECT_EQ(tok->encode("<s>a", {.parse_special = true}), (std::vector<TokenId>{7, 0}));
  EXPECT_EQ(tok->encode("d"), (std::vector<TokenId>{}));  // not in vocab: dropped, as llama.cpp does
}

TEST(Tokenizer, BadVocabulariesAreClearErrors) {
  {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "llama");
    std::vector<uint8_t> s;
    auto g = tiny_vocab(b, s);
    auto t = Tokenizer::from_gguf(*g);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::unsupported);
    EXPECT_NE(t.error().message.find("tokenizer model 'llama'"), std::string::npos);
  }
  {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "gpt2");
    b.kv_string("tokenizer.ggml.pre", "klingon");
    b.kv_strings("tokenizer.ggml.tokens", {"a"});
    b.kv_strings("tokenizer.ggml.merges", {});
    std::vector<uint8_t> s;
    auto g = tiny_vocab(b, s);
    auto t = Tokenizer::from_gguf(*g);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message.find("pre-tokenizer 'klingon' is not supported (supported: default, gpt-2"),
              std::string::npos)
        << t.error().message;
  }
  {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "gpt2");
    b.kv_strings("tokenizer.ggml.merges", {});
    std::vector<uint8_t> s;
    auto g = tiny_vocab(b, s);
    auto t = Tokenizer::from_gguf(*g);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::not_found);
    EXPECT_NE(t.error().message.find("'tokenizer.ggml.tokens' is missing"), std::string::npos);
  }
  {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "gpt2");
    b.kv_strings("tokenizer.ggml.tokens", {"a", "b"});
    b.kv_i32s("tokenizer.ggml.token_type", {1});
    b.kv_strings("tokenizer.ggml.merges", {});
    std::vector<uint8_t> s;
    auto g = tiny_vocab(b, s);
    auto t = Tokenizer::from_gguf(*g);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message.find("token_type has 1 entries for 2 tokens"), std::string::npos);
  }
  {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "gpt2");
    b.kv_strings("tokenizer.ggml.tokens", {"a", "b"});
    b.kv_strings("tokenizer.ggml.merges", {});
    b.kv_u32("tokenizer.ggml.bos_token_id", 99);
    std::vector<uint8_t> s;
    auto g = tiny_vocab(b, s);
    auto t = Tokenizer::from_gguf(*g);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message.find("bos_token_id' = 99 is not a token id"), std::string::npos);
  }
}

}  // namespace
}  // namespace chorus
