// Every malformed GGUF gets a clear error value naming what and where; none crashes.
#include <gtest/gtest.h>

#include "engine/model/gguf.h"
#include "tests/support/gguf_builder.h"

namespace chorus {
namespace {

using test::GgufBuilder;
using test::patch;

Result<GgufFile> parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse({bytes.data(), bytes.size()}, "bad.gguf");
}

void expect_error(const std::vector<uint8_t>& bytes, Errc code, const std::string& fragment) {
  auto r = parse(bytes);
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_EQ(r.error().code, code) << r.error().to_string();
  EXPECT_NE(r.error().message.find(fragment), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.rfind("bad.gguf", 0), 0u) << "error must name the file: " << r.error().message;
}

// A small valid file: two metadata keys and one Q8_0 tensor of 64 elements.
GgufBuilder small_builder() {
  GgufBuilder b;
  b.kv_string("general.architecture", "llama");
  b.kv_u32("llama.block_count", 2);
  b.tensor("w", 8, {64}, std::vector<uint8_t>(68, 1));
  return b;
}

constexpr size_t kFirstKeyLen = 24;  // header: magic 4, version 4, tensor count 8, kv count 8

TEST(GgufBadInput, ValidBaseFileParses) {
  auto r = parse(small_builder().build());
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->tensors().size(), 1u);
}

TEST(GgufBadInput, EmptyAndTinyFiles) {
  expect_error({}, Errc::bad_format, "too small");
  expect_error({'G', 'G', 'U'}, Errc::bad_format, "too small");
}

TEST(GgufBadInput, WrongMagic) {
  auto f = small_builder().build();
  f[0] = 'X';
  expect_error(f, Errc::bad_format, "bad magic 'XGUF'");
}

TEST(GgufBadInput, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u, 1000u}) {
    auto f = small_builder().build();
    patch(f, 4, v);
    expect_error(f, Errc::unsupported, "GGUF version " + std::to_string(v));
  }
  auto f = small_builder().build();
  patch(f, 4, uint32_t{0x03000000});
  expect_error(f, Errc::unsupported, "big-endian");
}

TEST(GgufBadInput, EveryTruncationIsAnError) {
  const auto full = small_builder().build();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
    auto r = parse(cut);
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(GgufBadInput, TruncatedHeaderSaysTruncated) {
  auto f = small_builder().build();
  f.resize(12);
  expect_error(f, Errc::bad_format, "truncated file: tensor count");
}

TEST(GgufBadInput, AbsurdCounts) {
  auto f = small_builder().build();
  patch(f, 16, uint64_t{1} << 60);
  expect_error(f, Errc::bad_format, "metadata count 1152921504606846976 cannot fit");
  f = small_builder().build();
  patch(f, 8, uint64_t{1} << 60);
  expect_error(f, Errc::bad_format, "tensor count 1152921504606846976 cannot fit");
}

TEST(GgufBadInput, InflatedStringLength) {
  auto f = small_builder().build();
  patch(f, kFirstKeyLen, uint64_t{1} << 60);
  expect_error(f, Errc::bad_format, "key length 1152921504606846976 exceeds");
  expect_error(f, Errc::bad_format, "offset 32: metadata #0");
}

TEST(GgufBadInput, AbsurdArrayLengths) {
  GgufBuilder b;
  std::vector<uint8_t> v;
  GgufBuilder::put(v, uint32_t{0});        // elements: uint8
  GgufBuilder::put(v, uint64_t{1} << 60);  // count
  b.kv_raw("big.array", 9, v);
  expect_error(b.build(), Errc::bad_format, "array of 1152921504606846976 uint8 cannot fit");

  GgufBuilder s;
  std::vector<uint8_t> w;
  GgufBuilder::put(w, uint32_t{8});  // elements: string
  GgufBuilder::put(w, uint64_t{1} << 60);
  s.kv_raw("tokenizer.ggml.tokens", 9, w);
  expect_error(s.build(), Errc::bad_format, "string array length 1152921504606846976");
  expect_error(s.build(), Errc::bad_format, "'tokenizer.ggml.tokens'");
}

TEST(GgufBadInput, UnknownValueTypes) {
  GgufBuilder b;
  b.kv_raw("odd", 99, {0, 0, 0, 0});
  expect_error(b.build(), Errc::bad_format, "metadata #0 'odd': unknown value type 99");

  GgufBuilder a;
  std::vector<uint8_t> v;
  GgufBuilder::put(v, uint32_t{77});
  GgufBuilder::put(v, uint64_t{1});
  a.kv_raw("odd.array", 9, v);
  expect_error(a.build(), Errc::bad_format, "unknown array element type 77");
}

TEST(GgufBadInput, NestedArraysAreUnsupported) {
  GgufBuilder b;
  std::vector<uint8_t> v;
  GgufBuilder::put(v, uint32_t{9});
  GgufBuilder::put(v, uint64_t{1});
  b.kv_raw("nested", 9, v);
  expect_error(b.build(), Errc::unsupported, "arrays of arrays");
}

TEST(GgufBadInput, DuplicateKeyAndTensorName) {
  GgufBuilder b;
  b.kv_u32("a", 1);
  b.kv_u32("a", 2);
  expect_error(b.build(), Errc::bad_format, "metadata #1 'a': duplicate metadata key");

  GgufBuilder t;
  t.tensor("w", 0, {4}, std::vector<uint8_t>(16));
  t.tensor("w", 0, {4}, std::vector<uint8_t>(16));
  expect_error(t.build(), Errc::bad_format, "tensor info #1 'w': duplicate tensor name");
}

TEST(GgufBadInput, UnknownTensorType) {
  for (uint32_t id : {4u, 31u, 99u, 0xffffffffu}) {
    GgufBuilder b;
    b.tensor("w", id, {32}, std::vector<uint8_t>(64));
    expect_error(b.build(), Errc::unsupported, "unknown tensor type id " + std::to_string(id));
  }
}

TEST(GgufBadInput, BadShapes) {
  GgufBuilder dims;
  dims.tensor("w", 0, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4));
  expect_error(dims.build(), Errc::bad_format, "5 dimensions (at most 4)");

  GgufBuilder block;
  block.tensor("w", 8, {33}, std::vector<uint8_t>(68));
  expect_error(block.build(), Errc::bad_format,
               "first dimension 33 is not a multiple of the Q8_0 block size 32");

  GgufBuilder overflow;
  overflow.tensor("w", 0, {uint64_t{1} << 40, uint64_t{1} << 40}, {});
  expect_error(overflow.build(), Errc::bad_format, "overflows the element count");

  GgufBuilder huge;
  huge.tensor("w", 0, {uint64_t{1} << 63}, {});
  expect_error(huge.build(), Errc::bad_format, "overflows");
}

TEST(GgufBadInput, TensorOutOfBounds) {
  auto f = small_builder().build();
  f.resize(f.size() - 1);
  expect_error(f, Errc::bad_format, "tensor 'w': data [");
  expect_error(f, Errc::bad_format, "lies outside the file");

  GgufBuilder b;
  b.tensor("w", 0, {4}, {}, /*offset_override=*/1 << 20);
  expect_error(b.build(), Errc::bad_format, "lies outside the file");
}

TEST(GgufBadInput, MisalignedTensor) {
  GgufBuilder b;
  b.tensor("w", 0, {4}, {}, /*offset_override=*/4);
  expect_error(b.build(), Errc::bad_format, "data offset 4 is not a multiple of the alignment 32");
}

TEST(GgufBadInput, BadAlignmentMetadata) {
  GgufBuilder zero;
  zero.kv_u32("general.alignment", 0);
  expect_error(zero.build(), Errc::bad_format, "alignment 0 is not a power of two");
  GgufBuilder three;
  three.kv_u32("general.alignment", 3);
  expect_error(three.build(), Errc::bad_format, "alignment 3 is not a power of two");
  GgufBuilder str;
  str.kv_string("general.alignment", "32");
  expect_error(str.build(), Errc::bad_format, "has type string, expected uint32");
}

TEST(GgufBadInput, MetadataOfTheWrongType) {
  GgufBuilder b;
  b.kv_string("llama.block_count", "thirty");
  b.kv_u32("general.name", 5);
  b.kv_i32("neg", -3);
  b.kv_strings("tokens", {"a"});
  const auto bytes = b.build();
  auto g = parse(bytes);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  auto n = g->get_uint("llama.block_count");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().code, Errc::bad_format);
  EXPECT_EQ(n.error().message,
            "bad.gguf: metadata 'llama.block_count' has type string, expected an unsigned integer");
  auto s = g->get_string("general.name");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("has type uint32, expected string"), std::string::npos);
  auto neg = g->get_uint("neg");
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.error().code, Errc::out_of_range);
  auto arr = g->get_array("tokens", GgufValueType::i32);
  ASSERT_FALSE(arr.ok());
  EXPECT_NE(arr.error().message.find("has type array of string, expected array of int32"), std::string::npos);
  auto missing = g->get_float("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::not_found);
  EXPECT_NE(missing.error().message.find("'nope' is missing"), std::string::npos);
}

TEST(GgufBadInput, MissingFile) {
  auto r = GgufFile::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::io);
  EXPECT_NE(r.error().message.find("/nonexistent/dir/model.gguf: cannot open"), std::string::npos);
}

TEST(GgufBadInput, DirectoryIsNotAModel) {
  auto r = GgufFile::open("/tmp");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::io);
}

}  // namespace
}  // namespace chorus
