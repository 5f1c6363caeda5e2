// Loading a model and a CPU device for a test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model.h"
#include "engine/step/generator.h"

namespace chorus::test {

// A CPU device with Q4_0, Q4_1 and Q8_0 in llama.cpp's order (CpuDeviceOptions::llama_order):
// for the tests that compare logits with llama.cpp's to the bit.
inline CpuDeviceOptions llama_order() {
  CpuDeviceOptions o;
  o.llama_order = true;
  return o;
}

// Loads the GGUF at `path` and creates a CPU device; a failure fails the test fatally (call it
// under ASSERT_NO_FATAL_FAILURE).
inline void load_model(const std::string& path, std::unique_ptr<Model>* model,
                       std::unique_ptr<CpuDevice>* device) {
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  *model = std::move(*m);
  auto d = CpuDevice::create();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  *device = std::move(*d);
}

// The last position's logits of `ids`, one forward of a CPU runner of its own (with f32
// activations: the exact arithmetic of the weights' values; else the int8 kernels).
inline std::vector<float> forward_logits(const Model& m, CpuDevice& device, const std::vector<TokenId>& ids,
                                         bool f32_activations) {
  auto kv = KvCache::create(m.config, KvCache::pages_for(static_cast<int64_t>(ids.size())));
  EXPECT_TRUE(kv.ok());
  CpuRunner runner(m.config, m.weights, device, static_cast<int>(ids.size()), f32_activations);
  SequenceKv seq;
  EXPECT_TRUE(kv->reserve(seq, static_cast<int64_t>(ids.size())).ok());
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < ids.size(); ++i)
    batch.push_back({ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size()});
  std::vector<float> logits(static_cast<size_t>(m.config.n_vocab));
  SequenceKv* seqs[] = {&seq};
  const Status st = runner.forward(batch, seqs, *kv, logits.data());
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  kv->release(seq);
  return logits;
}

// n greedy tokens after `prompt` through the Generator (end of generation does not stop it);
// fills `first` with the first generated position's logits when given.
inline std::vector<TokenId> greedy(const Model& m, CpuDevice& device, const std::vector<TokenId>& prompt,
                                   int n, std::vector<float>* first) {
  GenerateOptions o;
  o.n_ctx = static_cast<int>(prompt.size()) + n + 1;
  o.max_new_tokens = n;
  o.stop_at_end_of_generation = false;
  o.sampling = SamplingParams::greedy();
  auto g = Generator::create(m, device, 1, o);
  EXPECT_TRUE(g.ok());
  auto st = (*g)->run(prompt, nullptr);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  if (first) *first = (*g)->first_logits();
  return (*g)->outputs()[0];
}

// How far llama.cpp's first logits of a golden prompt (generation goldens with "first_top" and
// "exact_top": its 256 largest, and the same ids' logits of llama.cpp on a copy of the file
// dequantized to F32, the exact arithmetic) are from the exact arithmetic: the largest distance.
inline float llama_exact_error(const nlohmann::json& p) {
  float far = 0;
  for (size_t k = 0; k < p["first_top"].size(); ++k)
    far = std::max(far, std::fabs(p["first_top"][k][1].get<float>() - p["exact_top"][k].get<float>()));
  return far;
}
// The smallest of those over the prompts: how far llama.cpp's own int8 kernels are from exact at
// best.
inline float llama_exact_error_floor(const nlohmann::json& prompts) {
  float floor = 1e9f;
  for (const auto& p : prompts)
    if (p.contains("first_top")) floor = std::min(floor, llama_exact_error(p));
  return floor;
}

// Over llama.cpp's 256 largest first logits of each golden prompt that has them: `device`'s int8
// kernels are no farther from the exact arithmetic than llama.cpp's own over the prompts — their
// mean distance no larger than llama.cpp's mean, their largest no larger than llama.cpp's largest
// (on one prompt either may be the nearer: int8 roundings move by chance with the summation
// order) — its f32 activations are the exact arithmetic to 1e-3 on each; the int8 kernels pick
// llama.cpp's best token and the f32 activations the exact arithmetic's (the two differ at a
// near-tie). Returns the prompts checked.
inline int expect_as_close_to_exact_as_llama(const Model& m, CpuDevice& device,
                                             const nlohmann::json& prompts) {
  int checked = 0, nearer = 0;
  double int8_sum = 0, llama_sum = 0;
  float int8_max = 0, llama_max = 0;
  for (const auto& p : prompts) {
    if (!p.contains("first_top")) continue;
    const auto ids = p["prompt_ids"].get<std::vector<TokenId>>();
    const auto& top = p["first_top"];
    const auto& exact = p["exact_top"];
    const float llama_far = llama_exact_error(p);
    float int8_far = 0, f32_far = 0;
    const auto int8 = forward_logits(m, device, ids, false);
    const auto f32 = forward_logits(m, device, ids, true);
    for (size_t k = 0; k < top.size(); ++k) {
      const int id = top[k][0].get<int>();
      const float ex = exact[k].get<float>();
      int8_far = std::max(int8_far, std::fabs(int8[id] - ex));
      f32_far = std::max(f32_far, std::fabs(f32[id] - ex));
    }
    const std::string name = p["name"].get<std::string>();
    std::printf(
        "  %-16s max |dlogit| from the exact over llama.cpp's top 256: chorus f32 %.2e, chorus int8 %.4f, "
        "llama.cpp %.4f\n",
        name.c_str(), f32_far, int8_far, llama_far);
    EXPECT_LE(f32_far, 1e-3f) << name;
    int8_sum += int8_far;
    llama_sum += llama_far;
    int8_max = std::max(int8_max, int8_far);
    llama_max = std::max(llama_max, llama_far);
    nearer += int8_far <= llama_far ? 1 : 0;
    size_t exact_best = 0;  // the exact arithmetic's best of llama.cpp's 256
    for (size_t k = 1; k < top.size(); ++k)
      if (exact[k].get<float>() > exact[exact_best].get<float>()) exact_best = k;
    auto argmax = [](const std::vector<float>& v) {
      return std::max_element(v.begin(), v.end()) - v.begin();
    };
    EXPECT_EQ(argmax(int8), top[0][0].get<int>()) << name << ": int8, llama.cpp's best";
    EXPECT_EQ(argmax(f32), top[exact_best][0].get<int>()) << name << ": f32, the exact arithmetic's best";
    ++checked;
  }
  if (checked == 0) return 0;
  std::printf(
      "  over %d prompts: chorus int8 mean %.4f, largest %.4f; llama.cpp mean %.4f, largest %.4f; "
      "chorus nearer on %d\n",
      checked, int8_sum / checked, int8_max, llama_sum / checked, llama_max, nearer);
  EXPECT_LE(int8_sum, llama_sum) << "the mean distance from the exact arithmetic";
  EXPECT_LE(int8_max, llama_max) << "the largest distance from the exact arithmetic";
  return checked;
}

// Each golden prompt (generation goldens: prompt_ids, greedy_ids, top2_gap) run greedily for n
// tokens against llama.cpp's continuation. A divergence fails unless llama.cpp's own top-2 gap
// there is below `max_gap` (a near-tie). Returns how many continuations are identical.
inline int greedy_goldens_identical(const Model& m, CpuDevice& device, const nlohmann::json& prompts, int n,
                                    float max_gap) {
  int identical = 0;
  for (const auto& p : prompts) {
    const auto want = p["greedy_ids"].get<std::vector<TokenId>>();
    const auto gaps = p["top2_gap"].get<std::vector<float>>();
    const auto got = greedy(m, device, p["prompt_ids"].get<std::vector<TokenId>>(), n, nullptr);
    int first_diff = -1;
    for (int i = 0; i < n && first_diff < 0; ++i)
      if (got[static_cast<size_t>(i)] != want[static_cast<size_t>(i)]) first_diff = i;
    if (first_diff < 0) {
      ++identical;
      continue;
    }
    const float gap = gaps[static_cast<size_t>(first_diff)];
    std::printf("  %-18s diverges at token %d (llama.cpp top-2 gap %.4f)\n",
                p["name"].get<std::string>().c_str(), first_diff, gap);
    EXPECT_LT(gap, max_gap) << p["name"] << " diverges at " << first_diff;
  }
  std::printf("  %d of %zu greedy continuations identical for %d tokens\n", identical, prompts.size(), n);
  return identical;
}

}  // namespace chorus::test
