// Loading a model and a CPU device for a test.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model.h"
#include "engine/step/generator.h"

namespace chorus::test {

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

}  // namespace chorus::test
