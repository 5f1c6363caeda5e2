// What the CUDA runner refuses to run, by name, read from the model alone (CudaRunner::check):
// this needs the CUDA targets compiled, not a device, so it runs wherever nvcc built them. The
// runner itself is tested against the CPU reference on a GPU (tests/gpu/).
#include <gtest/gtest.h>

#include <string>

#include "engine/model/model.h"
#include "tests/support/test_util.h"

#ifdef CHORUS_HAVE_CUDA
#include "engine/forward/cuda/cuda_runner.h"

namespace chorus {
namespace {

std::unique_ptr<Model> tiny(const std::string& file) {
  auto m = Model::load(test::goldens_dir() + "/" + file);
  EXPECT_TRUE(m.ok()) << file << ": " << (m.ok() ? "" : m.error().to_string());
  return m.ok() ? std::move(*m) : nullptr;
}

// The reason the runner gives, or "" when it runs the model.
std::string refusal(const ModelConfig& c, const Weights& w) {
  const Status s = CudaRunner::check(c, w);
  if (s.ok()) return "";
  EXPECT_EQ(s.error().code, Errc::unsupported) << s.error().message;
  return s.error().message;
}

TEST(CudaRunnerCheck, RunsTheArchitecturesItCarries) {
  for (const char* f : {"tiny_llama_f32.gguf", "tiny_llama.gguf", "tiny_qwen2.gguf", "tiny_qwen3.gguf",
                        "tiny_qwen35.gguf", "tiny_qwen35moe.gguf", "tiny_qwen3next_f32.gguf"}) {
    auto m = tiny(f);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(refusal(m->config, m->weights), "") << f;
  }
}

TEST(CudaRunnerCheck, RefusesByNameWhatItDoesNotRunYet) {
  auto gemma = tiny("tiny_gemma3_f32.gguf");
  auto llama3 = tiny("tiny_llama3_rope_f32.gguf");
  auto yarn = tiny("tiny_llama_yarn_f32.gguf");
  auto plain = tiny("tiny_llama_f32.gguf");
  ASSERT_TRUE(gemma && llama3 && yarn && plain);
  EXPECT_NE(refusal(gemma->config, gemma->weights).find("Gemma 3's sliding-window layers"),
            std::string::npos);
  EXPECT_NE(refusal(llama3->config, llama3->weights).find("Llama 3's RoPE frequency factors"),
            std::string::npos);
  EXPECT_NE(refusal(yarn->config, yarn->weights).find("YaRN RoPE scaling"), std::string::npos);
  ModelConfig c = plain->config;
  c.rope_mscale = 1.5f;
  EXPECT_NE(refusal(c, plain->weights).find("attn_factor other than 1"), std::string::npos);
  c = plain->config;
  c.head_dim = 48;
  EXPECT_NE(refusal(c, plain->weights).find("head size 48"), std::string::npos);
  c = plain->config;
  c.n_head = c.n_head_kv * 16;
  EXPECT_NE(refusal(c, plain->weights).find("groups of 16"), std::string::npos);
}

}  // namespace
}  // namespace chorus
#endif
