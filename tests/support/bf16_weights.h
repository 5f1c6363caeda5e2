// The GPU's weights as the CPU sees them (tests of the CUDA runner against the CPU): every weight
// matrix of a model replaced by f32 copies of its values rounded to bf16, the form in which the
// CUDA runner holds them (engine/forward/cuda/cuda_weights.h; MoE routers stay f32 there, and here). A CPU
// runner over them differs from the GPU by the device's own arithmetic only (bf16 activations,
// summation order), not by the deliberate rounding of the weights, which alone moves the tiny
// hybrid models' logits by up to 3e-2 in relative L2 (measured on the CPU: tiny_qwen3next_f32,
// one decode token) and can swap a MoE layer's chosen experts.
#pragma once

#include <list>
#include <vector>

#include "engine/model/model.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp16.h"

namespace chorus::test {

// `store` keeps the copies; it must outlive every use of `w`.
inline void round_weights_to_bf16(Weights& w, std::list<std::vector<float>>* store) {
  auto round = [store](WeightMatrix& m) {
    if (!m.data || m.rows == 0) return;
    std::vector<float>& v = store->emplace_back(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r)
      dequantize_row(m.type, m.data + r * static_cast<int64_t>(m.row_bytes), v.data() + r * m.cols, m.cols);
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    m = WeightMatrix{TensorType::f32, m.rows, m.cols, reinterpret_cast<const uint8_t*>(v.data()),
                     static_cast<size_t>(m.cols) * sizeof(float)};
  };
  const bool tied = w.output.data == w.token_embd.data;
  round(w.token_embd);
  if (tied)
    w.output = w.token_embd;
  else
    round(w.output);
  for (LayerWeights& L : w.layers) {
    for (WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.w_qkv, &L.w_z,
                            &L.w_beta, &L.w_alpha, &L.w_ba, &L.w_ssm_out, &L.sh_gate, &L.sh_up, &L.sh_down})
      round(*m);
    for (auto* experts : {&L.exp_gate, &L.exp_up, &L.exp_down})
      for (WeightMatrix& m : *experts) round(m);
  }
}

}  // namespace chorus::test
