// The engine on other shapes and architectures than the default model: tiny random-weight GGUFs
// (tests/goldens/tiny_*.gguf, written by tools/goldens/make_tiny_models.py) against logits and
// greedy continuations recorded from llama.cpp on the same files (f32 KV cache).
//   tiny_llama      llama, GQA 4/2, untied output, Q8_0 matrices
//   tiny_qwen2      qwen2, q/k/v biases, NeoX rope, tied output, Q4_0 matrices
//   tiny_llama_f32  llama with f32 matrices (the dequantize-and-dot kernel path)
//   tiny_qwen3      qwen3, per-head q/k RMSNorm, head_dim 64 != n_embd / n_head, tied output
//   tiny_llama_iq4  the same shape in IQ4_XS and IQ4_NL: against the exact arithmetic (below)
//   tiny_llama_q23k the same shape in Q2_K and Q3_K: against the exact arithmetic (below)
//   tiny_llama_kq   llama quantized by llama-quantize into every panel type (Q4_K, Q5_K, Q6_K,
//                   Q5_0, Q5_1): against the exact arithmetic (below)
//   tiny_llama3_rope_f32  llama with rope_freqs.weight: Llama 3's per-pair RoPE divisors
//   tiny_llama_yarn_f32   llama with YaRN (factor 4 over an original context of 64)
//   tiny_gemma3_f32 gemma3: sliding windows of 8 on layers 0, 1 with their own RoPE base, head 64,
//                   q/k norms, post-norms, GeGLU, embedding scale, a final logit soft-cap
#include <gtest/gtest.h>

#include <cmath>

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model.h"
#include "engine/step/generator.h"
#include "kernels/cpu/fp16.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

class TinyModels : public ::testing::TestWithParam<std::string> {};

// The greedy continuation of a golden's `greedy` entry (prompt, ids, top2_gap) is llama.cpp's, or
// leaves it first where llama.cpp's top two were closer than `max_gap`.
void expect_greedy_as_recorded(const Model& m, CpuDevice& device, const nlohmann::json& g, float max_gap,
                               const std::string& file) {
  const auto want = g["ids"].get<std::vector<TokenId>>();
  const auto gaps = g["top2_gap"].get<std::vector<float>>();
  const auto got = test::greedy(m, device, g["prompt"].get<std::vector<TokenId>>(),
                                static_cast<int>(want.size()), nullptr);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    std::printf("  %s: greedy diverges at %zu (llama.cpp's top-2 gap %.4f)\n", file.c_str(), i, gaps[i]);
    EXPECT_LT(gaps[i], max_gap) << file << ": greedy diverges at " << i << " without a near-tie";
    break;
  }
}

TEST_P(TinyModels, LogitsAndGreedyMatchLlamaCpp) {
  const auto golden = test::load_golden("tiny_models.json");
  ASSERT_TRUE(golden.has_value()) << "tests/goldens/tiny_models.json is missing";
  const std::string file = GetParam();
  ASSERT_TRUE((*golden)["models"].contains(file)) << file;
  const auto& g = (*golden)["models"][file];
  auto model = Model::load(test::goldens_dir() + "/" + file);
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  // Q4_0, Q4_1 and Q8_0 in llama.cpp's order (the default runs them on weight panels, whose sums
  // go in another order: a random-weight hybrid model then drifts by 1e-2 over 40 tokens, as its
  // int8 activations round differently).
  auto device = CpuDevice::create(test::llama_order());
  ASSERT_TRUE(device.ok());
  const bool f32 = file.find("f32") != std::string::npos;
  // Integer formats follow llama.cpp's order of operations on the AVX2 and AVX-512 tables and
  // match to the bit there (docs/engine.md); the scalar table, a readable reference in a plain
  // summation order, is not llama.cpp's and is not held to this. f32 matrices use a plain dot
  // product (llama.cpp a tiled GEMM), so they agree to float rounding.
  const bool simd = std::string((*device)->kernels().isa) != "scalar";
  const float tol_rel = f32 ? 1e-5f : (simd ? 0.0f : 1e-6f);

  for (const auto& c : g["cases"]) {
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    const auto want = c["last_logits"].get<std::vector<float>>();
    std::vector<float> got;
    test::greedy(**model, **device, ids, 1, &got);
    ASSERT_EQ(got.size(), want.size());
    float max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(want[i]));
      max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
    }
    std::printf("  %-20s %2zu tokens: max |dlogit| %.3g (max |logit| %.3g)\n", file.c_str(), ids.size(),
                max_diff, max_abs);
    EXPECT_LE(max_diff, tol_rel * max_abs) << file << ", " << ids.size() << " tokens";
  }

  expect_greedy_as_recorded(**model, **device, g["greedy"], 1e-3f, file);
}

// An f16 KV cache on the models with f32 matrices (no int8 activations: the caches' difference
// is the KV rounding alone), against llama.cpp with its f16 cache
// (tests/goldens/tiny_models_kvf16.json, type_k = type_v = f16, flash attention off). llama.cpp
// also rounds the queries and the softmax probabilities to f16, chorus keeps them f32, so the
// two are not the same bits: chorus's logits must lie within llama.cpp's own f16 error (its f16
// logits against its f32 ones) of llama.cpp's f16 logits, and differ from the f32 cache's (the
// keys and values were rounded). The greedy continuation is llama.cpp's f16 one, or diverges
// where its top two are closer than that error.
class TinyModelsF16Kv : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModelsF16Kv, LogitsMatchLlamaCppsF16Cache) {
  const auto golden16 = test::load_golden("tiny_models_kvf16.json");
  const auto golden32 = test::load_golden("tiny_models.json");
  ASSERT_TRUE(golden16.has_value() && golden32.has_value());
  ASSERT_EQ((*golden16)["kv_type"], "f16");
  const std::string file = GetParam();
  const auto& g16 = (*golden16)["models"][file];
  const auto& g32 = (*golden32)["models"][file];
  auto model = Model::load(test::goldens_dir() + "/" + file);
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  CpuDeviceOptions opts = test::llama_order();
  opts.kv_type = KvType::f16;
  auto device = CpuDevice::create(opts);
  ASSERT_TRUE(device.ok());
  ASSERT_EQ(g16["cases"].size(), g32["cases"].size());
  float bound = 0.0f;  // the largest of llama.cpp's own f16 errors
  for (size_t c = 0; c < g16["cases"].size(); ++c) {
    const auto ids = g16["cases"][c]["ids"].get<std::vector<TokenId>>();
    const auto want16 = g16["cases"][c]["last_logits"].get<std::vector<float>>();
    const auto want32 = g32["cases"][c]["last_logits"].get<std::vector<float>>();
    std::vector<float> got;
    test::greedy(**model, **device, ids, 1, &got);
    ASSERT_EQ(got.size(), want16.size());
    float max_abs = 0, to16 = 0, to32 = 0, theirs = 0;  // theirs: llama.cpp's f16 from its f32
    for (size_t i = 0; i < want16.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(want16[i]));
      to16 = std::max(to16, std::fabs(got[i] - want16[i]));
      to32 = std::max(to32, std::fabs(got[i] - want32[i]));
      theirs = std::max(theirs, std::fabs(want16[i] - want32[i]));
    }
    std::printf(
        "  %-24s %2zu tokens: max |dlogit| to llama.cpp f16 %.3g; from its f32: chorus f16 %.3g, "
        "llama.cpp f16 %.3g (max |logit| %.3g)\n",
        file.c_str(), ids.size(), to16, to32, theirs, max_abs);
    EXPECT_LE(to16, theirs) << file << ", " << ids.size() << " tokens";
    EXPECT_GT(to32, 0.0f) << file << ", " << ids.size() << " tokens: nothing was rounded";
    bound = std::max(bound, theirs);
  }
  expect_greedy_as_recorded(**model, **device, g16["greedy"], bound, file);
}

// The runner stores each key and value into an f16 cache rounded to nearest even, where the f32
// cache holds it: after the same prefill, the first layer's pages (computed before any attention
// read the cache) are the f32 cache's rounded, bit for bit, at every position.
TEST(TinyModelsF16Kv, TheFirstLayersPagesAreTheF32CachesRounded) {
  auto model = Model::load(test::goldens_dir() + "/tiny_llama_f32.gguf");
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  const ModelConfig& c = (*model)->config;
  auto device = CpuDevice::create();
  ASSERT_TRUE(device.ok());
  std::vector<TokenId> ids;
  for (int i = 0; i < 37; ++i) ids.push_back((i * 37 + 11) % c.n_vocab);
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < ids.size(); ++i)
    batch.push_back({ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size()});
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  auto fill = [&](KvType type) {
    auto kv = KvCache::create(c, KvCache::pages_for(static_cast<int64_t>(ids.size())), type);
    EXPECT_TRUE(kv.ok());
    CpuRunner runner(c, (*model)->weights, **device, static_cast<int>(ids.size()));
    SequenceKv seq;
    EXPECT_TRUE(kv->reserve(seq, static_cast<int64_t>(ids.size())).ok());
    SequenceKv* seqs[] = {&seq};
    EXPECT_TRUE(runner.forward(batch, seqs, *kv, logits.data()).ok());
    return std::make_pair(std::move(*kv), seq);
  };
  auto [k32, s32] = fill(KvType::f32);
  auto [k16, s16] = fill(KvType::f16);
  const int ps = KvCache::page_size(), kvd = c.kv_dim();
  int64_t checked = 0;
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    const int32_t p32 = s32.pages[pos / ps], p16 = s16.pages[pos / ps];
    const size_t slot = pos % ps;
    for (int i = 0; i < kvd; ++i) {
      ASSERT_EQ(k16.k_f16(0, p16)[i * ps + slot], f32_to_f16(k32.k(0, p32)[i * ps + slot]))
          << pos << " " << i;
      ASSERT_EQ(k16.v_f16(0, p16)[slot * kvd + i], f32_to_f16(k32.v(0, p32)[slot * kvd + i]))
          << pos << " " << i;
      checked += 2;
    }
  }
  EXPECT_EQ(checked, static_cast<int64_t>(ids.size()) * 2 * kvd);
}

INSTANTIATE_TEST_SUITE_P(F32Matrices, TinyModelsF16Kv,
                         ::testing::Values("tiny_llama_f32.gguf", "tiny_gemma3_f32.gguf",
                                           "tiny_qwen3next_f32.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.find('.'));
                           return n;
                         });

// The RoPE variants the two files above carry are read, not passed over: the golden test above
// could not tell a file whose scaling chorus ignores from one it applies only if it ran them.
TEST(TinyModels, RopeScalingIsReadFromTheFile) {
  auto llama3 = Model::load(test::goldens_dir() + "/tiny_llama3_rope_f32.gguf");
  ASSERT_TRUE(llama3.ok()) << llama3.error().to_string();
  EXPECT_NE((*llama3)->weights.rope_freqs, nullptr);
  auto yarn = Model::load(test::goldens_dir() + "/tiny_llama_yarn_f32.gguf");
  ASSERT_TRUE(yarn.ok()) << yarn.error().to_string();
  const ModelConfig& c = (*yarn)->config;
  EXPECT_TRUE(c.rope_yarn);
  EXPECT_EQ(c.rope_scale, 4.0f);
  EXPECT_EQ(c.yarn_orig_ctx, 64);
  EXPECT_FLOAT_EQ(c.rope_mscale, 1.0f + 0.1f * std::log(4.0f));
  // n_rot 32, base 1e4, 64 positions: 32 ln(64 / (2 pi b)) / (2 ln 1e4), floored for b = 32, ceiled for b
  // = 1.
  const auto [lo, hi] = c.yarn_corr_dims();
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 5.0f);  // 4.03 ceiled
}

// Gemma 3's hyper-parameters as llama.cpp reads them (models/gemma3.cpp): the layer pattern, the
// windows' RoPE base, the scales.
TEST(TinyModels, Gemma3ConfigIsReadFromTheFile) {
  auto m = Model::load(test::goldens_dir() + "/tiny_gemma3_f32.gguf");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const ModelConfig& c = (*m)->config;
  EXPECT_EQ(c.n_swa, 8);
  EXPECT_EQ(c.swa_layer, (std::vector<bool>{true, true, false}));  // pattern 3: every third layer global
  EXPECT_EQ(c.rope_base_swa, 5000.0f);
  EXPECT_EQ(c.rope_base, 1e6f);
  EXPECT_EQ(c.rope_layout, RopeLayout::rope_neox);
  EXPECT_EQ(c.embd_scale, std::sqrt(128.0f));
  EXPECT_EQ(c.q_scale(), 0.125f);  // 1 / sqrt(head_dim 64), not 1 / sqrt(n_embd / n_head)
  EXPECT_EQ(c.logit_softcap, 3.0f);
  EXPECT_TRUE(c.geglu && c.post_norms && c.qk_norm && c.tied_output);
  EXPECT_NE((*m)->weights.layers[0].attn_post_norm, nullptr);
  EXPECT_NE((*m)->weights.layers[2].ffn_post_norm, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Architectures, TinyModels,
                         ::testing::Values("tiny_llama.gguf", "tiny_qwen2.gguf", "tiny_llama_f32.gguf",
                                           "tiny_qwen3.gguf", "tiny_qwen35.gguf", "tiny_qwen35moe.gguf",
                                           "tiny_qwen3next_f32.gguf", "tiny_llama3_rope_f32.gguf",
                                           "tiny_llama_yarn_f32.gguf", "tiny_gemma3_f32.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.find('.'));
                           return n;
                         });

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// Files in every panel type (Q4_K, Q5_K, Q6_K, Q5_0, Q5_1; IQ4_XS, IQ4_NL; Q2_K, Q3_K), quantized by
// llama.cpp's own llama-quantize. Their int8 activations differ from llama.cpp's by design
// (llama.cpp reads the k-quants and IQ4_XS with one activation scale per 256 values, chorus with
// one per 32), so the oracle is
// the exact arithmetic: llama.cpp's logits on a copy with every tensor dequantized to F32 (the
// gguf package's dequantizer; f32 KV cache).
//  - with f32 activations (dequantize-and-dot: the weights' values alone), chorus matches it to
//    float rounding, as for the F32 files (1e-5 of the largest logit);
//  - with the int8 kernels (weight panels), chorus must be at least as close to it as llama.cpp's
//    own kernels on the quantized file are, case by case (they differ by 2.0-2.5 % of the
//    largest logit here).
class TinyModelsPanels : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModelsPanels, PanelTypesAreAsCloseToTheExactLogitsAsLlamaCpp) {
  const auto golden = test::load_golden("tiny_models.json");
  ASSERT_TRUE(golden.has_value());
  const auto& g = (*golden)["models"][GetParam()];
  ASSERT_TRUE(g.contains("dequantized_cases"));
  auto model = Model::load(test::goldens_dir() + "/" + GetParam());
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  auto device = CpuDevice::create();
  ASSERT_TRUE(device.ok());
  ASSERT_EQ(g["cases"].size(), g["dequantized_cases"].size());
  for (size_t c = 0; c < g["cases"].size(); ++c) {
    const auto ids = g["cases"][c]["ids"].get<std::vector<TokenId>>();
    const auto llama = g["cases"][c]["last_logits"].get<std::vector<float>>();
    const auto exact = g["dequantized_cases"][c]["last_logits"].get<std::vector<float>>();
    float max_abs = 0;
    for (float v : exact) max_abs = std::max(max_abs, std::fabs(v));
    const auto f32 = test::forward_logits(**model, **device, ids, true);
    const auto int8 = test::forward_logits(**model, **device, ids, false);
    const float llama_err = max_abs_diff(llama, exact), f32_err = max_abs_diff(f32, exact),
                int8_err = max_abs_diff(int8, exact);
    std::printf(
        "  %2zu tokens, max |dlogit| from the exact logits: chorus f32 activations %.3g, chorus int8 %.3g, "
        "llama.cpp %.3g (max |logit| %.3g)\n",
        ids.size(), f32_err, int8_err, llama_err, max_abs);
    EXPECT_LE(f32_err, 1e-5f * max_abs) << ids.size() << " tokens";
    EXPECT_LE(int8_err, llama_err) << ids.size() << " tokens";
  }
  EXPECT_GT((*model)->weights.panel_bytes(), 0u) << "the int8 runs read weight panels";
}

// A runner in llama.cpp's order reads Q4_0, Q4_1 and Q8_0 from their rows: it packs no panels for them, and a
// default runner made after it on the same weights packs them then (and nothing twice).
TEST(TinyModelsPanelsMemory, LlamaOrderPacksNoPanelsOfItsTypes) {
  for (const char* file : {"tiny_llama.gguf", "tiny_qwen2.gguf"}) {  // Q8_0 matrices; Q4_0 ones
    SCOPED_TRACE(file);
    auto model = Model::load(test::goldens_dir() + "/" + file);
    ASSERT_TRUE(model.ok()) << model.error().to_string();
    const Model& m = **model;
    auto llama = CpuDevice::create(test::llama_order());
    auto plain = CpuDevice::create();
    ASSERT_TRUE(llama.ok() && plain.ok());
    const std::vector<TokenId> ids = {5, 17, 42, 7};
    const auto a = test::forward_logits(m, **llama, ids, false);
    EXPECT_EQ(m.weights.panel_bytes(), 0u) << "llama.cpp's order packed panels it never reads";
    EXPECT_EQ(m.weights.layers[0].wq.panels, nullptr);
    const auto b = test::forward_logits(m, **plain, ids, false);
    const size_t packed = m.weights.panel_bytes();
    EXPECT_GT(packed, 0u) << "the default runner reads Q8_0 and Q4_0 from panels";
    EXPECT_NE(m.weights.layers[0].wq.panels, nullptr) << "a layer's matrix (Q8_0; Q4_0) is on panels";
    const auto c = test::forward_logits(m, **llama, ids, false);
    EXPECT_EQ(c, a) << "the llama.cpp-order runner still reads the rows once panels exist";
    test::forward_logits(m, **plain, ids, false);
    EXPECT_EQ(m.weights.panel_bytes(), packed) << "packed twice";
    EXPECT_NE(a, b) << "the two orders give different bits (else this test shows nothing)";
  }
}

// tiny_llama_kq: Q4_K, Q5_K, Q6_K, Q5_0, Q5_1; tiny_llama_iq4: IQ4_XS and IQ4_NL; tiny_llama_q23k: Q2_K
// and Q3_K. (Q4_0 and Q4_1 share llama.cpp's activations, so their panels move a tiny model's
// logits by float rounding only: tiny_qwen2's Q4_0 tied llama.cpp's distance from the exact
// logits to 1e-7, which this test's strict comparison cannot judge; the default model's Q4_1 is
// held to the exact arithmetic in test_generation.cpp.)
INSTANTIATE_TEST_SUITE_P(Files, TinyModelsPanels,
                         ::testing::Values("tiny_llama_kq.gguf", "tiny_llama_iq4.gguf",
                                           "tiny_llama_q23k.gguf"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('.')); });

}  // namespace
}  // namespace chorus
