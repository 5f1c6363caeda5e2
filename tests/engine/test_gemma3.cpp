// Gemma 3 270M (the pretrained base model, Q4_K_M: Q5_0, Q8_0, Q4_K and Q6_K matrices) against
// llama.cpp on the same file: the prompts' token ids, the first generated position's largest
// logits and greedy continuations, recorded by llama-cpp-python with an f32 KV cache and flash
// attention off (tests/goldens/generate_gemma3.json, tools/goldens/make_generation_goldens.py
// --set gemma3). The logits are checked against the exact arithmetic of the file's weights:
// llama.cpp's own logits on a copy of the file dequantized to F32. The file comes from scripts/setup.sh
// --with-gemma; without it the tests skip, unless CHORUS_REQUIRE_GEMMA=1 (scripts/test.sh sets it) makes that
// a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model.h"
#include "engine/step/generator.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

class Gemma3 : public ::testing::Test {
 protected:
  void SetUp() override {
    golden_ = test::load_golden("generate_gemma3.json");
    ASSERT_TRUE(golden_.has_value());
    const std::string path = test::optional_model_path((*golden_)["model"].get<std::string>());
    if (path.empty()) {
      if (const char* r = std::getenv("CHORUS_REQUIRE_GEMMA"); r && std::string(r) == "1")
        FAIL() << "Gemma 3 270M missing (scripts/setup.sh --with-gemma)";
      GTEST_SKIP() << "Gemma 3 270M not found (scripts/setup.sh --with-gemma fetches it)";
    }
    if (!model_) {
      auto m = Model::load(path);
      ASSERT_TRUE(m.ok()) << m.error().to_string();
      model_ = std::move(*m);
      auto d = CpuDevice::create();
      ASSERT_TRUE(d.ok()) << d.error().to_string();
      device_ = std::move(*d);
      auto l = CpuDevice::create(test::llama_order());
      ASSERT_TRUE(l.ok()) << l.error().to_string();
      llama_device_ = std::move(*l);
    }
  }

  static std::unique_ptr<Model> model_;
  static std::unique_ptr<CpuDevice> device_;
  static std::unique_ptr<CpuDevice> llama_device_;  // Q4_0, Q4_1 and Q8_0 in llama.cpp's order
  std::optional<nlohmann::json> golden_;
};

std::unique_ptr<Model> Gemma3::model_;
std::unique_ptr<CpuDevice> Gemma3::device_;
std::unique_ptr<CpuDevice> Gemma3::llama_device_;

TEST_F(Gemma3, ConfigAsLlamaCppReadsIt) {
  const ModelConfig& c = model_->config;
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.n_layer, 18);
  EXPECT_EQ(c.n_swa, 512);
  for (int l = 0; l < c.n_layer; ++l) EXPECT_EQ(c.is_swa(l), l % 6 != 5) << "layer " << l;
  EXPECT_EQ(c.rope_base_swa, 10000.0f);
  EXPECT_EQ(c.q_scale(), 1.0f / 16.0f);  // head 256
  EXPECT_EQ(c.n_vocab, 262144);
}

TEST_F(Gemma3, PromptTokensMatchLlamaCpp) {
  for (const auto& p : (*golden_)["prompts"]) {
    const auto want = p["prompt_ids"].get<std::vector<TokenId>>();
    const auto got =
        model_->tokenizer.encode(p["text"].get<std::string>(), {.add_special = true, .parse_special = true});
    EXPECT_EQ(got, want) << p["name"];
  }
}

// Over llama.cpp's 256 largest logits of the first generated position: chorus with f32
// activations is the exact arithmetic (llama.cpp's logits on the dequantized copy) to 1e-3;
// chorus's int8 activations (one scale per 32 values) are no farther from it than llama.cpp's
// own (Q8_0, and Q8_K for the k-quants) are. Measured: f32 0 (the same floats); int8 1.14, 0.39,
// 0.47 (Q8_0 on weight panels; 1.14, 0.32, 0.61 in llama.cpp's order) against llama.cpp's 1.43,
// 0.51, 0.97 (logits up to 22; the test asserts the mean and the largest over the prompts). Both
// pick llama.cpp's best token, the exact arithmetic's too.
TEST_F(Gemma3, FirstLogitsAreAsCloseToTheExactArithmeticAsLlamaCpp) {
  EXPECT_GE(test::expect_as_close_to_exact_as_llama(*model_, *device_, (*golden_)["prompts"]), 3);
}

// Greedy continuations against llama.cpp's, with Q8_0 in llama.cpp's order: a divergence only at
// a near-tie (llama.cpp's top two within 0.1). Measured: 4 of 6 identical, divergences at gaps
// 0.07 and 0.01.
TEST_F(Gemma3, GreedyContinuationsMatchLlamaCpp) {
  const auto& prompts = (*golden_)["prompts"];
  const int identical = test::greedy_goldens_identical(*model_, *llama_device_, prompts,
                                                       (*golden_)["n_steps"].get<int>(), 0.1f);
  EXPECT_GE(identical * 2, static_cast<int>(prompts.size())) << identical << " of " << prompts.size();
}

// The default kernels (Q8_0 on weight panels, its sums in another order) move this model's
// logits by up to about 1 from the exact arithmetic, as llama.cpp's own do (the test above), so
// a divergence is allowed where llama.cpp's top two are closer than llama.cpp's own smallest
// error from the exact logits (0.51 on these prompts). Measured: 3 of 6 identical, divergences
// at gaps 0.11, 0.19 and 0.03.
TEST_F(Gemma3, GreedyContinuationsDivergeOnlyWithinLlamaCppsOwnError) {
  const auto& prompts = (*golden_)["prompts"];
  const float floor = test::llama_exact_error_floor(prompts);
  ASSERT_GT(floor, 0.1f);
  ASSERT_LT(floor, 1.0f);
  const int identical =
      test::greedy_goldens_identical(*model_, *device_, prompts, (*golden_)["n_steps"].get<int>(), floor);
  EXPECT_GE(identical * 2, static_cast<int>(prompts.size())) << identical << " of " << prompts.size();
}

}  // namespace
}  // namespace chorus
