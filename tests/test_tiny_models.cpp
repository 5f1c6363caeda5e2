// The engine on other shapes and architectures than the default model: tiny random-weight GGUFs
// (tests/goldens/tiny_*.gguf, written by tools/goldens/make_tiny_models.py) against logits and
// greedy continuations recorded from llama.cpp on the same files (f32 KV cache).
//   tiny_llama      llama, GQA 4/2, untied output, Q8_0 matrices
//   tiny_qwen2      qwen2, q/k/v biases, NeoX rope, tied output, Q4_0 matrices
//   tiny_llama_f32  llama with f32 matrices (the dequantize-and-dot kernel path)
//   tiny_qwen3      qwen3, per-head q/k RMSNorm, head_dim 64 != n_embd / n_head, tied output
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generator.h"
#include "engine/model.h"
#include "gpu/cpu_device.h"
#include "tests/test_util.h"

namespace chorus {
namespace {

class TinyModels : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModels, LogitsAndGreedyMatchLlamaCpp) {
  const auto golden = test::load_golden("tiny_models.json");
  ASSERT_TRUE(golden.has_value()) << "tests/goldens/tiny_models.json is missing";
  const std::string file = GetParam();
  ASSERT_TRUE((*golden)["models"].contains(file)) << file;
  const auto& g = (*golden)["models"][file];
  auto model = Model::load(test::goldens_dir() + "/" + file);
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  auto device = CpuDevice::create();
  ASSERT_TRUE(device.ok());
  const bool f32 = file.find("f32") != std::string::npos;
  // Integer formats follow llama.cpp's order of operations and match to the bit; f32 matrices
  // use a plain dot product (llama.cpp a tiled GEMM), so they agree to float rounding.
  const float tol_rel = f32 ? 1e-5f : 1e-6f;

  for (const auto& c : g["cases"]) {
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    const auto want = c["last_logits"].get<std::vector<float>>();
    GenerateOptions o;
    o.n_ctx = static_cast<int>(ids.size()) + 2;
    o.max_new_tokens = 1;
    o.sampling = SamplingParams::greedy();
    auto gen = Generator::create(**model, **device, 1, o);
    ASSERT_TRUE(gen.ok());
    ASSERT_TRUE((*gen)->run(ids, nullptr).ok());
    const auto& got = (*gen)->first_logits();
    ASSERT_EQ(got.size(), want.size());
    float max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(want[i]));
      max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
    }
    std::printf("  %-20s %2zu tokens: max |dlogit| %.3g (max |logit| %.3g)\n", file.c_str(), ids.size(), max_diff, max_abs);
    EXPECT_LE(max_diff, tol_rel * max_abs) << file << ", " << ids.size() << " tokens";
  }

  const auto prompt = g["greedy"]["prompt"].get<std::vector<TokenId>>();
  const auto want = g["greedy"]["ids"].get<std::vector<TokenId>>();
  const auto gaps = g["greedy"]["top2_gap"].get<std::vector<float>>();
  GenerateOptions o;
  o.n_ctx = static_cast<int>(prompt.size() + want.size()) + 1;
  o.max_new_tokens = static_cast<int>(want.size());
  o.stop_at_end_of_generation = false;
  o.sampling = SamplingParams::greedy();
  auto gen = Generator::create(**model, **device, 1, o);
  ASSERT_TRUE(gen.ok());
  ASSERT_TRUE((*gen)->run(prompt, nullptr).ok());
  const auto& got = (*gen)->outputs()[0];
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    EXPECT_LT(gaps[i], 1e-3f) << file << ": greedy diverges at " << i << " without a near-tie";
    break;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, TinyModels,
                         ::testing::Values("tiny_llama.gguf", "tiny_qwen2.gguf", "tiny_llama_f32.gguf", "tiny_qwen3.gguf",
                                           "tiny_qwen35.gguf", "tiny_qwen35moe.gguf",
                                           "tiny_qwen3next_f32.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.find('.'));
                           return n;
                         });

}  // namespace
}  // namespace chorus
