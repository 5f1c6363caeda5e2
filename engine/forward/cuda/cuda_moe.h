// The mixture-of-experts feed-forward layers of qwen35moe and qwen3next models on a CUDA
// device, for the CudaRunner, with the CPU's routing and order of operations
// (engine/forward/cpu/cpu_runner_moe.cpp): per layer a router in f32 (so that the experts chosen are the
// CPU's, not those of bf16 rounding), softmax, the top n_expert_used experts renormalised; each
// expert's rows through the slots that chose it (so an expert's rows come from memory once a
// step, however many tokens chose it); the shared expert through cuBLAS, gated by
// sigmoid(w . x); the slots summed in order. Everything runs on the device with no host round trip, so a
// decode step stays one graph. Experts are bf16, stacked [n_expert][rows][cols] per matrix.
#pragma once

#include <memory>

#include "base/status.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace chorus {

class CudaDevice;

class CudaMoe {
 public:
  // Whether these layers can run here: an error naming what cannot (Errc::unsupported) or what
  // is malformed (Errc::bad_format: a layer's expert count not the model's).
  static Status check(const ModelConfig& c, const Weights& w);
  // Uploads every MoE layer's weights; scratch for max_tokens tokens per step.
  static Result<std::unique_ptr<CudaMoe>> create(const ModelConfig& c, const Weights& w, CudaDevice& dev,
                                                 int max_tokens);
  ~CudaMoe();

  // Layer l's feed-forward over T tokens: h [T][n_embd] the normed input, its output added to
  // x [T][n_embd]. Nothing synchronizes or allocates: it can be captured.
  Status layer(int l, float* h, float* x, int T);

 private:
  struct Impl;
  explicit CudaMoe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
