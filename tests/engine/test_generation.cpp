// The CPU engine against llama.cpp on the default model: first-position logits and greedy
// continuations recorded by llama-cpp-python (f32 KV cache) on the same GGUF, and llama.cpp's
// first logits on a copy of it dequantized to F32, the exact arithmetic of its weights
// (tests/goldens/generate_smollm.json, tools/goldens/make_generation_goldens.py). In llama.cpp's
// order (CpuDeviceOptions::llama_order) chorus is llama.cpp to the bit; by default its Q4_1 and
// Q8_0 products run on weight panels, summed in another order, and are held to the exact
// arithmetic instead: no farther from it than llama.cpp is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/kv_cache.h"
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
  static std::unique_ptr<CpuDevice> llama_device_;  // Q4_1 and Q8_0 in llama.cpp's order
  std::optional<nlohmann::json> golden_;
};

std::unique_ptr<Model> GenerationGoldens::model_;
std::unique_ptr<CpuDevice> GenerationGoldens::device_;
std::unique_ptr<CpuDevice> GenerationGoldens::llama_device_;

// The default kernels (Q4_1 and Q8_0 on weight panels): over llama.cpp's 256 largest first
// logits of the twelve prompts, chorus's int8 activations are no farther from the exact arithmetic
// than llama.cpp's own — mean 0.5420 against 0.6066, largest 0.9180 against 1.6954, the nearer on
// 6 of 12 (on one prompt it is chance) — its f32 activations are the exact arithmetic to 1e-3
// (measured: 0), the int8 kernels pick llama.cpp's best token and the f32 activations the exact
// arithmetic's. On chat_capital llama.cpp's best token, ahead of its second by 0.057, is the exact
// arithmetic's second.
TEST_F(GenerationGoldens, FirstLogitsAreAsCloseToTheExactArithmeticAsLlamaCpp) {
  EXPECT_EQ(test::expect_as_close_to_exact_as_llama(*model_, *device_, (*golden_)["prompts"]), 12);
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

// In llama.cpp's order every greedy continuation is llama.cpp's for 64 tokens: 12 of 12. The
// AVX2 and AVX-512 tables give the same bits (12 of 12 under CHORUS_ISA=avx2 too); the scalar
// table, a readable reference in a plain summation order, is not llama.cpp's and is not held to
// this.
TEST_F(GenerationGoldens, GreedyContinuationsMatchLlamaCppInItsOrder) {
  const auto& prompts = (*golden_)["prompts"];
  const int identical = test::greedy_goldens_identical(*model_, *llama_device_, prompts, 64, 0.1f);
  EXPECT_EQ(identical, static_cast<int>(prompts.size())) << identical << " of " << prompts.size();
}

// By default the panels' other summation order moves the int8 activations' roundings, and with
// them the logits, by as much as llama.cpp's own kernels are from the exact arithmetic (above), so
// a continuation may leave llama.cpp's only where llama.cpp's top two are closer than its own
// smallest error from the exact logits over the twelve prompts (0.2441, plain_german): there the
// int8 arithmetic cannot tell them apart. Measured: 4 of 12 identical for 64 tokens, the AVX2
// and AVX-512 tables alike, every divergence at a gap of 0.151 or less.
TEST_F(GenerationGoldens, GreedyContinuationsDivergeOnlyWithinLlamaCppsOwnError) {
  const auto& prompts = (*golden_)["prompts"];
  const float floor = test::llama_exact_error_floor(prompts);
  ASSERT_NEAR(floor, 0.2441f, 1e-4f);
  const int identical = test::greedy_goldens_identical(*model_, *device_, prompts, 64, floor);
  std::printf("  (by default, against llama.cpp's order)\n");
  EXPECT_EQ(identical, 4) << "docs/engine.md states 4 of 12";
}

// Sequence 0's logits at the end of its prompt and after each of `steps` greedy tokens, with
// `prompts` run together: their prompts in one step, then one token each per step.
std::vector<std::vector<float>> batched_logits(const Model& m, CpuDevice& device,
                                               const std::vector<std::vector<TokenId>>& prompts, int steps) {
  const auto n = static_cast<int32_t>(prompts.size());
  int64_t tokens = 0;
  for (const auto& p : prompts) tokens += static_cast<int64_t>(p.size());
  auto kv = KvCache::create(m.config, KvCache::pages_for(tokens + n * steps) + n);
  EXPECT_TRUE(kv.ok());
  CpuRunner runner(m.config, m.weights, device, static_cast<int>(tokens), false);
  std::vector<SequenceKv> seq(prompts.size());
  std::vector<SequenceKv*> seqs;
  for (int32_t s = 0; s < n; ++s) {
    EXPECT_TRUE(kv->reserve(seq[s], static_cast<int64_t>(prompts[s].size()) + steps).ok());
    seqs.push_back(&seq[s]);
  }
  const auto vocab = static_cast<size_t>(m.config.n_vocab);
  std::vector<std::vector<float>> out;
  std::vector<BatchToken> batch;
  for (int32_t s = 0; s < n; ++s)
    for (size_t i = 0; i < prompts[s].size(); ++i)
      batch.push_back({prompts[s][i], static_cast<int32_t>(i), s, i + 1 == prompts[s].size()});
  std::vector<float> logits(vocab * static_cast<size_t>(n));
  for (int step = 0; step <= steps; ++step) {
    EXPECT_TRUE(runner.forward(batch, seqs, *kv, logits.data()).ok());
    out.emplace_back(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(vocab));
    batch.clear();
    for (int32_t s = 0; s < n; ++s) {
      const float* row = logits.data() + static_cast<size_t>(s) * vocab;
      const auto best = static_cast<TokenId>(std::max_element(row, row + vocab) - row);
      batch.push_back({best, static_cast<int32_t>(prompts[s].size()) + step, s, true});
    }
  }
  for (auto& s : seq) kv->release(s);
  return out;
}

// By default what a sequence computes does not depend on what else its steps carry: its logits
// at the end of its prompt and at each of 48 greedy steps after it are the same bits alone (one
// token a step) as beside two other sequences (three a step). That is what lets a program print
// the same on one engine as on a busy node of a cluster. In llama.cpp's order attention sums a
// one-token step's values in another order than a larger step's, as llama.cpp does; the int8
// roundings hide most of that, not all of it: there 9 of the 48 steps' logits are the same bits
// (measured), so the comparison can fail.
TEST_F(GenerationGoldens, LogitsDoNotDependOnTheBatchByDefault) {
  const auto& prompts = (*golden_)["prompts"];
  const auto a = prompts[0]["prompt_ids"].get<std::vector<TokenId>>();
  const auto b = prompts[1]["prompt_ids"].get<std::vector<TokenId>>();
  const auto c = prompts[6]["prompt_ids"].get<std::vector<TokenId>>();
  constexpr int kSteps = 48;
  for (CpuDevice* d : {device_.get(), llama_device_.get()}) {
    const bool llama = d == llama_device_.get();
    const auto alone = batched_logits(*model_, *d, {a}, kSteps);
    const auto together = batched_logits(*model_, *d, {a, b, c}, kSteps);
    EXPECT_EQ(alone[0], together[0]) << (llama ? "llama.cpp's order" : "default") << ": the prompt's logits";
    int same = 0;
    for (int i = 1; i <= kSteps; ++i)
      same += alone[static_cast<size_t>(i)] == together[static_cast<size_t>(i)];
    std::printf("  %s: %d of %d decode steps' logits the same bits alone and batched\n",
                llama ? "llama.cpp's order" : "default", same, kSteps);
    if (llama)  // fewer than 48: the comparison can fail
      EXPECT_EQ(same, 9) << "llama.cpp's order: docs/engine.md states 9 of 48";
    else
      EXPECT_EQ(same, kSteps) << "default: the logits depend on the batch";
  }
}

// An f16 KV cache (CpuDeviceOptions::kv_type), against llama.cpp with its f16 cache
// (tests/goldens/generate_smollm_kvf16.json: llama-cpp-python 0.3.36, type_k = type_v = f16,
// flash attention off). On this model the int8 activations turn the f16 roundings into flips
// that move logits by up to about one unit in both implementations (llama.cpp's f16 cache against
// its f32 one: up to 1.02 on the recorded first logits, and 2 of 12 greedy continuations
// identical), so the logits themselves are checked on the tiny f32-matrix models
// (test_tiny_models.cpp) and here only the continuations, in llama.cpp's order of the products
// (CpuDeviceOptions::llama_order), so that only the caches' arithmetic differs.
class F16KvGoldens : public GenerationGoldens {
 protected:
  void SetUp() override {
    GenerationGoldens::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    if (!f16_device_) {
      CpuDeviceOptions o = test::llama_order();  // the cache's arithmetic alone against llama.cpp's
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
