// GGUF loader on well-formed files: every value type, arrays, alignment, tensor views; and
// the default model as a user would download it.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/model/gguf.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

using test::GgufBuilder;

TEST(Gguf, EveryValueTypeRoundTrips) {
  GgufBuilder b;
  b.kv_raw("u8", 0, {200});
  b.kv_raw("i8", 1, {0xfe});
  b.kv_raw("u16", 2, GgufBuilder::bytes(uint16_t{65000}));
  b.kv_raw("i16", 3, GgufBuilder::bytes(int16_t{-30000}));
  b.kv_u32("u32", 4000000000u);
  b.kv_i32("i32", -2000000000);
  b.kv_f32("f32", 1.5f);
  b.kv_bool("bool", true);
  b.kv_string("str", std::string("with\0nul", 8));
  b.kv_u64("u64", uint64_t{1} << 63);
  b.kv_raw("i64", 11, GgufBuilder::bytes(int64_t{-5}));
  b.kv_raw("f64", 12, GgufBuilder::bytes(2.25));
  b.kv_strings("strs", {"a", "", "ccc"});
  b.kv_i32s("ints", {3, -1, 7});
  const auto bytes = b.build();
  auto g = GgufFile::parse({bytes.data(), bytes.size()}, "ok.gguf");
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(*g->get_uint("u8"), 200u);
  EXPECT_EQ(*g->get_int("i8"), -2);
  EXPECT_EQ(*g->get_uint("u16"), 65000u);
  EXPECT_EQ(*g->get_int("i16"), -30000);
  EXPECT_EQ(*g->get_uint("u32"), 4000000000u);
  EXPECT_EQ(*g->get_int("i32"), -2000000000);
  EXPECT_EQ(*g->get_float("f32"), 1.5);
  EXPECT_TRUE(*g->get_bool("bool"));
  EXPECT_EQ(*g->get_string("str"), std::string_view("with\0nul", 8));
  EXPECT_EQ(*g->get_uint("u64"), uint64_t{1} << 63);
  EXPECT_FALSE(g->get_int("u64").ok()) << "2^63 does not fit int64";
  EXPECT_EQ(*g->get_int("i64"), -5);
  EXPECT_EQ(*g->get_float("f64"), 2.25);
  const auto strs = g->get_array("strs", GgufValueType::string);
  ASSERT_TRUE(strs.ok());
  ASSERT_EQ((*strs)->count, 3u);
  EXPECT_EQ((*strs)->strings[2], "ccc");
  EXPECT_EQ((*strs)->strings[1], "");
  const auto ints = g->get_array("ints", GgufValueType::i32);
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ((*ints)->int_at(1), -1);
  EXPECT_EQ(g->metadata().size(), 14u);
  EXPECT_EQ(g->metadata()[0].key, "u8");
  EXPECT_NE(g->find("ints")->to_string().find("[int32 x 3] 3, -1, 7"), std::string::npos);
}

TEST(Gguf, TensorsAreViewsAtAlignedOffsets) {
  GgufBuilder b;
  b.alignment = 64;
  b.kv_u32("general.alignment", 64);
  std::vector<uint8_t> f32(4 * 8);
  for (int i = 0; i < 8; ++i) {
    const float v = static_cast<float>(i) * 0.5f;
    std::memcpy(f32.data() + 4 * i, &v, 4);
  }
  b.tensor("a", 0, {8}, f32);
  b.tensor("b", 2, {32, 2}, std::vector<uint8_t>(36, 0x11));  // Q4_0: 2 blocks of 18 bytes
  b.tensor("c", 12, {256}, std::vector<uint8_t>(144, 0));     // Q4_K: 1 block
  const auto bytes = b.build();
  auto g = GgufFile::parse({bytes.data(), bytes.size()}, "t.gguf");
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_EQ(g->alignment(), 64u);
  EXPECT_EQ(g->data_offset() % 64, 0u);
  ASSERT_EQ(g->tensors().size(), 3u);
  const GgufTensor* a = g->find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->n_bytes, 32u);
  float third;
  std::memcpy(&third, a->data + 8, 4);
  EXPECT_EQ(third, 1.0f);
  const GgufTensor* q = g->find_tensor("b");
  EXPECT_EQ(q->type, TensorType::q4_0);
  EXPECT_EQ(q->n_dims, 2);
  EXPECT_EQ(q->ne[1], 2);
  EXPECT_EQ(q->n_elements, 64u);
  EXPECT_EQ(q->n_bytes, 36u);
  EXPECT_EQ(q->offset % 64, 0u);
  EXPECT_EQ(q->shape_string(), "[32, 2]");
  EXPECT_EQ(g->find_tensor("c")->n_bytes, 144u);
  EXPECT_EQ(g->find_tensor("missing"), nullptr);
}

TEST(Gguf, Version2Loads) {
  GgufBuilder b;
  b.version = 2;
  b.kv_u32("x", 1);
  const auto bytes = b.build();
  auto g = GgufFile::parse({bytes.data(), bytes.size()}, "v2.gguf");
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_EQ(g->version(), 2u);
}

TEST(Gguf, DefaultModelDescribesSmolLM2) {
  CHORUS_REQUIRE_DEFAULT_MODEL(g);
  EXPECT_EQ(*g->get_string("general.architecture"), "llama");
  EXPECT_EQ(*g->get_uint("llama.block_count"), 30u);
  EXPECT_EQ(*g->get_uint("llama.embedding_length"), 576u);
  EXPECT_EQ(*g->get_uint("llama.attention.head_count"), 9u);
  EXPECT_EQ(*g->get_uint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(*g->get_uint("llama.feed_forward_length"), 1536u);
  const GgufTensor* emb = g->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->ne[0], 576);
  EXPECT_EQ(emb->ne[1], 49152);
  // Every tensor lies inside the file and is aligned (the loader's invariants 1-2).
  for (const GgufTensor& t : g->tensors()) {
    EXPECT_EQ(t.offset % g->alignment(), 0u) << t.name;
    EXPECT_LE(g->data_offset() + t.offset + t.n_bytes, g->file_size()) << t.name;
  }
  EXPECT_EQ(g->tensors().size(), 272u);
}

}  // namespace
}  // namespace chorus
