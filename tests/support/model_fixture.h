// Loading a model and a CPU device for a test.
#pragma once

#include <gtest/gtest.h>

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

// Loads the GGUF at `path` and creates a CPU device; a failure fails the test fatally (call it
// under ASSERT_NO_FATAL_FAILURE).
// A CPU device with Q8_0 in llama.cpp's order (CpuDeviceOptions::llama_order): for the tests
// that compare logits with llama.cpp's to the bit.
inline CpuDeviceOptions llama_order() {
  CpuDeviceOptions o;
  o.llama_order = true;
  return o;
}

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
