// Dequantization against goldens recorded with the `gguf` Python package's own (numpy)
// dequantizers — an implementation we did not write (tools/goldens/make_dequant_goldens.py).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp16.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

TEST(Dequant, MatchesGgufPythonGoldens) {
  const auto golden = test::load_golden("dequant.json");
  ASSERT_TRUE(golden.has_value()) << "tests/goldens/dequant.json is missing";
  std::set<std::string> seen;
  for (const auto& c : (*golden)["cases"]) {
    const std::string name = c["type"];
    const auto info = tensor_type_info(c["type_id"].get<uint32_t>());
    ASSERT_TRUE(info.has_value()) << name;
    EXPECT_EQ(info->name, name);
    EXPECT_EQ(info->block_elems, c["block_elems"].get<uint32_t>()) << name;
    EXPECT_EQ(info->block_bytes, c["block_bytes"].get<uint32_t>()) << name;
    ASSERT_TRUE(info->can_dequantize) << name;
    const std::string raw = test::from_hex(c["hex"]);
    const int64_t n = c["n_elements"];
    ASSERT_EQ(raw.size(), tensor_row_bytes(*info, static_cast<uint64_t>(n))) << name;
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(info->type, raw.data(), out.data(), n);
    const auto& want = c["values"];
    ASSERT_EQ(want.size(), out.size());
    for (int64_t i = 0; i < n; ++i) {
      const float w = want[static_cast<size_t>(i)].get<float>();
      // Products are formed in f32 by both sides; allow one rounding step of difference.
      ASSERT_NEAR(out[i], w, 1e-6f * std::max(1.0f, std::fabs(w))) << name << " element " << i;
    }
    seen.insert(name);
  }
  for (const char* t : {"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "Q2_K",
                        "Q3_K", "IQ4_NL", "IQ4_XS"})
    EXPECT_TRUE(seen.count(t)) << "no golden for " << t;
}

TEST(Dequant, SupportedTypesAreTheIssueList) {
  for (auto t :
       {TensorType::f32, TensorType::f16, TensorType::bf16, TensorType::q8_0, TensorType::q4_0,
        TensorType::q4_1, TensorType::q5_0, TensorType::q5_1, TensorType::q4_k, TensorType::q5_k,
        TensorType::q6_k, TensorType::q2_k, TensorType::q3_k, TensorType::iq4_nl, TensorType::iq4_xs})
    EXPECT_TRUE(can_dequantize(t)) << tensor_type_name(t);
  EXPECT_FALSE(can_dequantize(TensorType::iq2_xxs));
}

TEST(Dequant, Q8_0ByHand) {
  // One block: d = 0.5, q = -16..15
  std::vector<uint8_t> block(34);
  const uint16_t d = f32_to_f16(0.5f);
  std::memcpy(block.data(), &d, 2);
  for (int i = 0; i < 32; ++i) block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
  float out[32];
  dequantize_row(TensorType::q8_0, block.data(), out, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * static_cast<float>(i - 16));
}

TEST(Dequant, DefaultModelEmbeddingRowsAreFinite) {
  CHORUS_REQUIRE_DEFAULT_MODEL(g);
  for (const GgufTensor& t : g->tensors()) {
    if (!can_dequantize(t.type)) continue;
    const auto& info = tensor_type_info(t.type);
    std::vector<float> row(static_cast<size_t>(t.ne[0]));
    dequantize_row(t.type, t.data, row.data(), t.ne[0]);  // first row of every tensor
    for (float v : row) ASSERT_TRUE(std::isfinite(v)) << t.name << " (" << info.name << ")";
  }
}

}  // namespace
}  // namespace chorus
