// The CPU engine against llama.cpp on the default model: first-position logits and greedy
// continuations recorded by llama-cpp-python (f32 KV cache) on the same GGUF
// (tests/goldens/generate_smollm.json, tools/goldens/make_generation_goldens.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/step/generator.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

std::vector<float> decode_b64_f32(const std::string& s) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  uint32_t buf = 0;
  int bits = 0;
  for (char c : s) {
    const auto p = chars.find(c);
    if (p == std::string::npos) continue;  // '=' and whitespace
    buf = (buf << 6) | static_cast<uint32_t>(p);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<uint8_t>((buf >> bits) & 0xff));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

std::vector<int> top_k_ids(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

class GenerationGoldens : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::default_model() == nullptr) {
      if (const char* r = std::getenv("CHORUS_REQUIRE_MODEL"); r && std::string(r) == "1")
        FAIL() << "default model missing";
      GTEST_SKIP() << "default model not found (run scripts/setup.sh)";
    }
    if (!model_) {
      auto m = Model::load(default_model_path());
      ASSERT_TRUE(m.ok()) << m.error().to_string();
      model_ = std::move(*m);
      auto d = CpuDevice::create();
      ASSERT_TRUE(d.ok()) << d.error().to_string();
      device_ = std::move(*d);
      auto l = CpuDevice::create(test::llama_order());
      ASSERT_TRUE(l.ok()) << l.error().to_string();
      llama_device_ = std::move(*l);
    }
    golden_ = test::load_golden("generate_smollm.json");
    ASSERT_TRUE(golden_.has_value());
  }

  // Greedy generation of n tokens after the prompt; fills first logits.
  std::vector<TokenId> greedy(const std::vector<TokenId>& prompt, int n, std::vector<float>* first) {
    return test::greedy(*model_, *device_, prompt, n, first);
  }

  static std::unique_ptr<Model> model_;
  static std::unique_ptr<CpuDevice> device_;
  static std::unique_ptr<CpuDevice> llama_device_;  // Q8_0 in llama.cpp's order
  std::optional<nlohmann::json> golden_;
};

std::unique_ptr<Model> GenerationGoldens::model_;
std::unique_ptr<CpuDevice> GenerationGoldens::device_;
std::unique_ptr<CpuDevice> GenerationGoldens::llama_device_;

// Tolerance on the top-10 logits by default. The model's Q4_1 matrices follow llama.cpp's order
// of float operations (activation quantization, dot products, softmax, exp); its Q8_0 output
// runs on weight panels, whose sums go in another order, which moves logits by about 1e-5. With
// int8 activations a single last-bit difference can move logits by ~0.3 on this model, so
// anything above 0.01 means the arithmetic drifted. In llama.cpp's order
// (CpuDeviceOptions::llama_order) every logit is llama.cpp's to the bit: the next test.
constexpr float kLogitTolerance = 0.01f;

TEST_F(GenerationGoldens, FirstLogitsMatchLlamaCpp) {
  int checked = 0;
  for (const auto& p : (*golden_)["prompts"]) {
    if (!p.contains("first_logits_b64") || p["first_logits_b64"].is_null()) continue;
    const auto want = decode_b64_f32(p["first_logits_b64"]);
    ASSERT_EQ(want.size(), static_cast<size_t>(model_->config.n_vocab));
    std::vector<float> got;
    greedy(p["prompt_ids"].get<std::vector<TokenId>>(), 1, &got);
    ASSERT_EQ(got.size(), want.size());
    auto top_want = top_k_ids(want, 10), top_got = top_k_ids(got, 10);
    std::sort(top_want.begin(), top_want.end());
    std::sort(top_got.begin(), top_got.end());
    EXPECT_EQ(top_got, top_want) << p["name"];
    float max_diff = 0.0f;
    for (int id : top_want) max_diff = std::max(max_diff, std::fabs(got[id] - want[id]));
    RecordProperty(p["name"].get<std::string>() + "_max_top10_logit_diff", std::to_string(max_diff));
    std::printf("  %-18s max |dlogit| over top-10: %.4f\n", p["name"].get<std::string>().c_str(), max_diff);
    EXPECT_LE(max_diff, kLogitTolerance) << p["name"];
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST_F(GenerationGoldens, FirstLogitsAreLlamaCppsToTheBitInItsOrder) {
  int checked = 0;
  for (const auto& p : (*golden_)["prompts"]) {
    if (!p.contains("first_logits_b64") || p["first_logits_b64"].is_null()) continue;
    const auto want = decode_b64_f32(p["first_logits_b64"]);
    std::vector<float> got;
    test::greedy(*model_, *llama_device_, p["prompt_ids"].get<std::vector<TokenId>>(), 1, &got);
    ASSERT_EQ(got.size(), want.size());
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0u) << p["name"] << ": logits not bit-identical to llama.cpp's";
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

// By default (the Q8_0 output on panels) every greedy continuation is llama.cpp's for 64 tokens,
// as docs/engine.md says: 12 of 12. The AVX2 and AVX-512 tables give the same bits (12 of 12
// under CHORUS_ISA=avx2 too); the scalar table, a readable reference in a plain summation order,
// is not llama.cpp's and is not held to this.
TEST_F(GenerationGoldens, GreedyContinuationsMatchLlamaCpp) {
  const auto& prompts = (*golden_)["prompts"];
  const int identical = test::greedy_goldens_identical(*model_, *device_, prompts, 64, 0.1f);
  EXPECT_EQ(identical, static_cast<int>(prompts.size())) << identical << " of " << prompts.size();
}

// An f16 KV cache (CpuDeviceOptions::kv_type), against llama.cpp with its f16 cache
// (tests/goldens/generate_smollm_kvf16.json: llama-cpp-python 0.3.36, type_k = type_v = f16,
// flash attention off). On this model the int8 activations turn the f16 roundings into flips
// that move logits by up to about one unit in both implementations (llama.cpp's f16 cache against
// its f32 one: up to 1.02 on the recorded first logits, and 2 of 12 greedy continuations
// identical), so the logits themselves are checked on the tiny f32-matrix models
// (test_tiny_models.cpp) and here only the continuations.
class F16KvGoldens : public GenerationGoldens {
 protected:
  void SetUp() override {
    GenerationGoldens::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    if (!f16_device_) {
      CpuDeviceOptions o;
      o.kv_type = KvType::f16;
      auto d = CpuDevice::create(o);
      ASSERT_TRUE(d.ok()) << d.error().to_string();
      f16_device_ = std::move(*d);
    }
    golden_f16_ = test::load_golden("generate_smollm_kvf16.json");
    ASSERT_TRUE(golden_f16_.has_value());
    ASSERT_EQ((*golden_f16_)["kv_type"], "f16");
  }
  static std::unique_ptr<CpuDevice> f16_device_;
  std::optional<nlohmann::json> golden_f16_;
};

std::unique_ptr<CpuDevice> F16KvGoldens::f16_device_;

// Greedy continuations against llama.cpp's with its f16 cache, 64 tokens: a divergence is allowed
// only where llama.cpp's top two are closer than llama.cpp's own f16 error from its f32 logits
// (the largest over the three prompts recorded whole): there its f16 cache cannot tell them
// apart either.
TEST_F(F16KvGoldens, GreedyContinuationsDivergeOnlyWithinLlamaCppsF16Error) {
  float bound = 0.0f;
  int recorded = 0;
  const auto& a = (*golden_)["prompts"];
  const auto& b = (*golden_f16_)["prompts"];
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].contains("first_logits_b64")) continue;
    const auto f32 = decode_b64_f32(a[i]["first_logits_b64"]), f16 = decode_b64_f32(b[i]["first_logits_b64"]);
    for (size_t j = 0; j < f32.size(); ++j) bound = std::max(bound, std::fabs(f16[j] - f32[j]));
    ++recorded;
  }
  ASSERT_EQ(recorded, 3);
  int theirs_identical = 0;  // llama.cpp's f16 continuations that are its f32 ones
  for (size_t i = 0; i < a.size(); ++i) theirs_identical += a[i]["greedy_ids"] == b[i]["greedy_ids"];
  std::printf(
      "  llama.cpp's f16 cache moves its first logits by up to %.4f; %d of %zu of its continuations "
      "are its f32 cache's\n",
      bound, theirs_identical, a.size());
  EXPECT_EQ(theirs_identical, 2) << "docs/engine.md states 2 of 12";
  EXPECT_NEAR(bound, 1.02f, 0.005f) << "docs/engine.md states 1.02";
  const int identical = test::greedy_goldens_identical(*model_, *f16_device_, b, 64, bound);
  EXPECT_EQ(identical, 3) << "docs/engine.md states 3 of 12 (the AVX2 and AVX-512 tables alike)";
}

}  // namespace
}  // namespace chorus
