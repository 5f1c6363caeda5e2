// UTF-8 decoding (llama.cpp's lossy rules), the byte-level alphabet and the streaming
// detokenizer's boundary logic.
#include <gtest/gtest.h>

#include <set>

#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace chorus {
namespace {

using unicode::decode_utf8_lossy;

TEST(Unicode, DecodesValidUtf8) {
  EXPECT_EQ(decode_utf8_lossy("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
            (std::vector<uint32_t>{'a', 0xE9, 0x20AC, 0x1F600}));
}

TEST(Unicode, InvalidBytesBecomeOneReplacementEach) {
  EXPECT_EQ(decode_utf8_lossy("\x80"), (std::vector<uint32_t>{0xFFFD}));
  EXPECT_EQ(decode_utf8_lossy("\xe2\x82"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));  // truncated
  EXPECT_EQ(decode_utf8_lossy("\xe2\x41"), (std::vector<uint32_t>{0xFFFD, 'A'}));     // bad continuation
  EXPECT_EQ(decode_utf8_lossy("\xff\xfe"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_utf8_lossy("\xf4\x90\x80\x80"),  // above U+10FFFF
            (std::vector<uint32_t>{0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}));
}

TEST(Unicode, OverlongAndSurrogatesDecodeAsLlamaCppDoes) {
  EXPECT_EQ(decode_utf8_lossy("\xc0\xaf"), (std::vector<uint32_t>{'/'}));
  EXPECT_EQ(decode_utf8_lossy("\xed\xa0\x80"), (std::vector<uint32_t>{0xD800}));
  std::string s;
  unicode::append_utf8(s, 0xD800);
  EXPECT_EQ(s, "\xed\xa0\x80");
}

TEST(Unicode, ByteAlphabetIsABijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = unicode::byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(unicode::codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(unicode::byte_to_codepoint(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(unicode::byte_to_codepoint('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(unicode::byte_to_codepoint('A'), uint32_t{'A'});
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string back;
  ASSERT_TRUE(unicode::byte_level_decode(unicode::byte_level_encode(all), &back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(unicode::byte_level_decode("\xe4\xb8\xad", &back));  // U+4E2D is not in the alphabet
}

TEST(IncrementalDecoder, HoldsIncompleteCharacters) {
  std::string s = "ab\xe2\x82";
  EXPECT_EQ(IncrementalDecoder::take_complete(s), "ab");
  EXPECT_EQ(s, "\xe2\x82");
  s += "\xac";
  EXPECT_EQ(IncrementalDecoder::take_complete(s), "\xe2\x82\xac");
  EXPECT_EQ(s, "");
  s = "x\xf0\x9f";
  EXPECT_EQ(IncrementalDecoder::take_complete(s), "x");
  s = "\xf0\x9f\x98";
  EXPECT_EQ(IncrementalDecoder::take_complete(s), "");
  EXPECT_EQ(s.size(), 3u);
}

TEST(IncrementalDecoder, EmitsBytesThatCanNeverComplete) {
  std::string s = "a\x80";  // stray continuation: emitted as is
  EXPECT_EQ(IncrementalDecoder::take_complete(s), "a\x80");
  s = "\xe2"
      "A";  // lead byte followed by a non-continuation
  EXPECT_EQ(IncrementalDecoder::take_complete(s),
            "\xe2"
            "A");
  s = "\xff";
  EXPECT_EQ(IncrementalDecoder::take_complete(s), "\xff");
}

}  // namespace
}  // namespace chorus
