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

// One golden case in llama.cpp's three modes (plain, special tokens parsed, BOS/EOS added): true
// when all three agree, else a failure that shows the ids.
bool matches_golden(const Tokenizer& tok, const nlohmann::json& c, const std::string& label, size_t index) {
  const std::string text = test::from_hex(c["hex"]);
  const auto plain = tok.encode(text, {.add_special = false, .parse_special = false});
  const auto special = tok.encode(text, {.add_special = false, .parse_special = true});
  const auto added = tok.encode(text, {.add_special = true, .parse_special = true});
  const auto want_plain = c["ids"].get<std::vector<TokenId>>();
  const auto want_special = c["ids_special"].get<std::vector<TokenId>>();
  const auto want_added = c["ids_add_special"].get<std::vector<TokenId>>();
  if (plain == want_plain && special == want_special && added == want_added) return true;
  ADD_FAILURE() << label << " case " << index << " hex " << c["hex"].get<std::string>().substr(0, 120)
                << "\n  plain   got " << ids_str(plain) << "\n          want " << ids_str(want_plain)
                << "\n  special got " << ids_str(special) << "\n          want " << ids_str(want_special)
                << "\n  added   got " << ids_str(added) << "\n          want " << ids_str(want_added);
  return false;
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
    mismatches += !matches_golden(*tok, c, pre, n++);
  }
  EXPECT_GE(n, 200u);
  EXPECT_EQ(mismatches, 0u) << mismatches << " of " << n << " cases differ";
}

INSTANTIATE_TEST_SUITE_P(PreTokenizers, TokenizerGoldens,
                         ::testing::Values("smollm", "qwen2", "llama3", "gpt2"));

// SentencePiece vocabularies (tools/goldens/make_spm_vocabs.py): a Llama 2 layout with
// add_space_prefix by default, and a Gemma layout without it and with user-defined tokens; and
// the real Gemma 3 270M file's 262,144 tokens when scripts/setup.sh --with-gemma fetched it
// (CHORUS_REQUIRE_GEMMA=1, as scripts/test.sh sets, makes its absence a failure).
// llama.cpp's ids on the same files are the oracle; SPM takes the bytes as they are, so even
// invalid UTF-8 must match.
class SpmGoldens : public ::testing::TestWithParam<std::string> {};

#define CHORUS_OPEN_SPM_GOLDEN(golden, g)                                                                   \
  const auto golden = test::load_golden("tokenizer_" + GetParam() + ".json");                               \
  ASSERT_TRUE(golden.has_value()) << "missing goldens for " << GetParam();                                  \
  const std::string model_file = (*golden)["model"].get<std::string>();                                     \
  const std::string model_path = test::optional_model_path(model_file);                                     \
  if (model_path.empty()) {                                                                                 \
    const char* req = std::getenv("CHORUS_REQUIRE_GEMMA");                                                  \
    if (req && std::string(req) == "1") FAIL() << model_file << " missing (scripts/setup.sh --with-gemma)"; \
    GTEST_SKIP() << model_file << " not found (scripts/setup.sh --with-gemma fetches it)";                  \
  }                                                                                                         \
  auto g = GgufFile::open(model_path);                                                                      \
  ASSERT_TRUE(g.ok()) << g.error().to_string()

TEST_P(SpmGoldens, TokenIdenticalToLlamaCpp) {
  const std::string name = GetParam();
  CHORUS_OPEN_SPM_GOLDEN(golden, g);
  auto tok = Tokenizer::from_gguf(*g);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->model(), TokenizerModel::spm);
  EXPECT_EQ(tok->bos(), (*golden)["bos_id"].get<TokenId>());
  EXPECT_EQ(tok->eos(), (*golden)["eos_id"].get<TokenId>());
  EXPECT_EQ(tok->vocab_size(), (*golden)["n_vocab"].get<size_t>());
  size_t n = 0, mismatches = 0, aborted = 0;
  for (const auto& c : (*golden)["cases"]) {
    if (c.contains("error")) {  // none expected: SPM does not decode UTF-8
      ++aborted;
      continue;
    }
    mismatches += !matches_golden(*tok, c, name, n++);
  }
  EXPECT_EQ(aborted, 0u);
  EXPECT_GE(n, 300u);
  EXPECT_EQ(mismatches, 0u) << mismatches << " of " << n << " cases differ";
}

// decode(encode(s)) == s byte for byte for valid UTF-8, except that a literal U+2581 comes back
// as the space it stands for; streaming gives the same bytes with the first piece's prefixed
// space kept, as a stream of generated tokens keeps it. Invalid UTF-8 travels as byte tokens and
// comes back byte for byte too, but where a truncated sequence's lead byte announces more bytes
// than it has, the piece swallows the next character, and a space there comes back as U+2581
// (llama.cpp's pieces are the same): so it is compared with every U+2581 read as a space.
std::string spaces_for_marks(std::string s) {
  for (size_t at; (at = s.find("\xe2\x96\x81")) != std::string::npos;) s.replace(at, 3, " ");
  return s;
}

TEST_P(SpmGoldens, RoundTripsEveryCorpusString) {
  CHORUS_OPEN_SPM_GOLDEN(golden, g);
  auto tok = Tokenizer::from_gguf(*g);
  ASSERT_TRUE(tok.ok());
  size_t n = 0;
  for (const auto& c : (*golden)["cases"]) {
    const std::string text = test::from_hex(c["hex"]);
    const std::string expected = spaces_for_marks(text);
    const bool valid = valid_utf8(text);
    const auto ids = tok->encode(text);
    const std::string decoded = tok->decode(ids);
    EXPECT_EQ(valid ? decoded : spaces_for_marks(decoded), expected) << "hex " << hex_of(text);
    IncrementalDecoder stream(*tok);
    std::string streamed;
    for (TokenId id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    const bool prefixed =
        tok->add_space_prefix() && !ids.empty() && tok->token_to_piece(ids[0]).starts_with(' ');
    EXPECT_EQ(valid ? streamed : spaces_for_marks(streamed), prefixed ? " " + expected : expected)
        << "hex " << hex_of(text);
    n += valid;
  }
  EXPECT_GE(n, 290u);  // the valid UTF-8 cases, compared exactly
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, SpmGoldens, ::testing::Values("spm_llama2", "spm_gemma", "gemma3"));

// A SentencePiece vocabulary small enough to reason about: the pair of the highest score merges
// first, the leftmost on ties; characters that are no token fall back to their bytes' tokens.
TEST(Tokenizer, SpmMergesByScoreHighestFirst) {
  auto build = [](bool with_abc, bool space_prefix, std::vector<uint8_t>& storage) {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "llama");
    std::vector<std::string> tokens = {"<unk>",
                                       "<s>",
                                       "</s>",
                                       "\xe2\x96\x81",
                                       "a",
                                       "b",
                                       "c",
                                       "ab",
                                       "bc",
                                       "aa",
                                       "<0xC3>",
                                       "<0xA9>",
                                       "\xe2\x96\x81"
                                       "a",
                                       "<0x0A>"};
    std::vector<float> scores = {0, 0, 0, -1, -2, -2, -2, -5, -4, -3, 0, 0, -6, 0};
    std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 6, 1, 6};
    if (with_abc) {
      tokens.push_back("abc");
      scores.push_back(-7);
      types.push_back(1);
    }
    b.kv_strings("tokenizer.ggml.tokens", tokens);
    b.kv_f32s("tokenizer.ggml.scores", scores);
    b.kv_i32s("tokenizer.ggml.token_type", types);
    if (!space_prefix) b.kv_bool("tokenizer.ggml.add_space_prefix", false);
    storage = b.build();
    return GgufFile::parse({storage.data(), storage.size()}, "spm.gguf");
  };
  std::vector<uint8_t> s1, s2, s3;
  auto g = build(true, false, s1);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  auto tok = Tokenizer::from_gguf(*g);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->bos(), 1);  // llama.cpp's defaults for SentencePiece
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->unk(), 0);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode("abc"), (std::vector<TokenId>{14}));           // bc (-4) before ab (-5), then a+bc
  EXPECT_EQ(tok->encode("aab"), (std::vector<TokenId>{9, 5}));         // aa (-3) beats ab (-5)
  EXPECT_EQ(tok->encode("aaa"), (std::vector<TokenId>{9, 4}));         // a tie: the leftmost pair
  EXPECT_EQ(tok->encode("\xc3\xa9"), (std::vector<TokenId>{10, 11}));  // é: its bytes
  EXPECT_EQ(tok->encode("z"), (std::vector<TokenId>{0}));              // no byte token: <unk>
  EXPECT_EQ(tok->encode("a a"), (std::vector<TokenId>{4, 12}));
  EXPECT_EQ(tok->encode("ab", {.add_special = true}), (std::vector<TokenId>{1, 7}));
  EXPECT_EQ(tok->decode(std::vector<TokenId>{4, 12, 13}), "a a\n");

  auto g2 = build(false, false, s2);
  auto tok2 = Tokenizer::from_gguf(*g2);
  ASSERT_TRUE(tok2.ok());
  EXPECT_EQ(tok2->encode("abc"), (std::vector<TokenId>{4, 8}));

  // With add_space_prefix (the default), a space goes before the first text and before text
  // after a special token; decode drops the first one again.
  auto g3 = build(false, true, s3);
  auto tok3 = Tokenizer::from_gguf(*g3);
  ASSERT_TRUE(tok3.ok());
  EXPECT_EQ(tok3->encode("a"), (std::vector<TokenId>{12}));
  EXPECT_EQ(tok3->encode("a</s>a", {.parse_special = true}), (std::vector<TokenId>{12, 2, 12}));
  EXPECT_EQ(tok3->decode(std::vector<TokenId>{12, 4}), "aa");
  EXPECT_EQ(tok3->decode(tok3->encode(" a")), " a");
  EXPECT_EQ(tok3->token_to_piece(12), " a");
}

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
    b.kv_string("tokenizer.ggml.model", "bert");
    std::vector<uint8_t> s;
    auto g = tiny_vocab(b, s);
    auto t = Tokenizer::from_gguf(*g);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::unsupported);
    EXPECT_NE(t.error().message.find("tokenizer model 'bert' is not supported (chorus supports 'gpt2'"),
              std::string::npos)
        << t.error().message;
  }
  {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "llama");
    b.kv_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    b.kv_i32s("tokenizer.ggml.scores", {0, 0});
    std::vector<uint8_t> s;
    auto g = tiny_vocab(b, s);
    auto t = Tokenizer::from_gguf(*g);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message.find("tokenizer.ggml.scores has 2 entries for 3 tokens"), std::string::npos)
        << t.error().message;
  }
  {
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "llama");
    b.kv_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    b.kv_strings("tokenizer.ggml.scores", {"0", "0", "0"});
    std::vector<uint8_t> s;
    auto g = tiny_vocab(b, s);
    auto t = Tokenizer::from_gguf(*g);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message.find("tokenizer.ggml.scores is not an array of f32 or i32"),
              std::string::npos)
        << t.error().message;
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
