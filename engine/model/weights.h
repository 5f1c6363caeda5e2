// The model's tensors as typed views into the GGUF mapping (no copy). Norm weights and biases
// stored in f16/bf16 are the only thing converted (to f32, owned here).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "kernels/tensor_type.h"

namespace chorus {

class GgufFile;
struct ModelConfig;

// A weight matrix [rows, cols] in its storage type: row r is output feature r.
struct WeightMatrix {
  TensorType type = TensorType::f32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;  // [rows, row_bytes]
  size_t row_bytes = 0;
  // The rows repacked as weight panels (kernels/cpu/panel.h) for the CPU kernels that read them,
  // once Weights::ensure_panels() ran; null before, and for types without panels. A cache that
  // ensure_panels() fills once, hence mutable.
  mutable const uint8_t* panels = nullptr;  // [n_panels, panel_bytes]
  mutable size_t panel_bytes = 0;
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  WeightMatrix wq;                   // [q_dim, n_embd]; [2 q_dim, n_embd] with an output gate,
                                     // each head's query then its gate
  WeightMatrix wk;                   // [kv_dim, n_embd]
  WeightMatrix wv;                   // [kv_dim, n_embd]
  WeightMatrix wo;                   // [n_embd, q_dim]
  const float* bq = nullptr;         // [q_dim] or nullptr (qwen2 has q/k/v biases)
  const float* bk = nullptr;         // [kv_dim] or nullptr
  const float* bv = nullptr;         // [kv_dim] or nullptr
  const float* q_norm = nullptr;     // [head_dim], qwen3: RMSNorm of each query head
  const float* k_norm = nullptr;     // [head_dim], qwen3: RMSNorm of each key head
  // Gated DeltaNet layers (hybrid models) instead of the attention weights above:
  WeightMatrix w_qkv;                     // [conv_dim, n_embd]: [q (Hk x dk) | k (Hk x dk) | v (Hv x dv)]
  WeightMatrix w_z;                       // [value_dim, n_embd]: output gate (attn_gate)
  WeightMatrix w_beta;                    // [Hv, n_embd]: write strength, sigmoid
  WeightMatrix w_alpha;                   // [Hv, n_embd]: decay input
  WeightMatrix w_ba;                      // qwen3next instead of w_beta, w_alpha: [2 Hv, n_embd], per key
                                          // head g: its r = Hv/Hk beta rows, then its r alpha rows
  const float* conv = nullptr;            // [K][conv_dim] causal convolution taps: the file's [conv_dim][K]
                                          // transposed at load (owned), so a tap is contiguous over channels
  const float* ssm_a = nullptr;           // [Hv] = -exp(A_log): g = ssm_a * softplus(alpha + dt_bias)
  const float* dt_bias = nullptr;         // [Hv]
  const float* ssm_norm = nullptr;        // [dv] RMSNorm of each head's output, shared by heads
  WeightMatrix w_ssm_out;                 // [n_embd, value_dim]
  const float* ffn_norm = nullptr;        // [n_embd] (qwen35: post_attention_norm)
  const float* attn_post_norm = nullptr;  // [n_embd], gemma3: RMSNorm of the attention output
  const float* ffn_post_norm = nullptr;   // [n_embd], gemma3: RMSNorm of the feed-forward output
  // Mixture of experts (ModelConfig::moe()) instead of w_gate/w_up/w_down:
  WeightMatrix router;  // [n_expert, n_embd] (ffn_gate_inp)
  std::vector<WeightMatrix> exp_gate, exp_up,
      exp_down;                          // per expert: [n_ff_exp, n_embd] x2, [n_embd, n_ff_exp]
  WeightMatrix sh_gate, sh_up, sh_down;  // the shared expert: [n_ff_shexp, n_embd] x2, [n_embd, n_ff_shexp]
  const float* sh_router = nullptr;      // [n_embd]: the shared expert's gate is sigmoid(sh_router . x)
  WeightMatrix w_gate;                   // [n_ff, n_embd]
  WeightMatrix w_up;                     // [n_ff, n_embd]
  WeightMatrix w_down;                   // [n_embd, n_ff]
};

struct Weights {
  WeightMatrix token_embd;             // [n_vocab, n_embd]
  const float* output_norm = nullptr;  // [n_embd]
  WeightMatrix output;                 // [n_vocab, n_embd]; the embedding when tied
  std::vector<LayerWeights> layers;
  // Llama 3's RoPE frequency divisors (rope_freqs.weight, [n_rot / 2]), or null: pair i's angle
  // is divided by rope_freqs[i].
  const float* rope_freqs = nullptr;

  Weights() = default;
  Weights(Weights&&) = default;
  Weights& operator=(Weights&&) = default;
  Weights(const Weights&) = delete;  // the panels of one set of matrices are made once
  Weights& operator=(const Weights&) = delete;

  // Errors name the tensor: missing, wrong shape (with the expected one), or a storage type
  // chorus has no kernel for.
  static Result<Weights> from_gguf(const GgufFile& gguf, const ModelConfig& config);

  // Repacks every matrix of a panel type that `wanted` accepts (all of them when it is empty)
  // into weight panels, each matrix once (a CPU runner whose kernels read panels calls it with
  // the types it reads from panels); a later call packs only what no call packed before.
  // Thread-safe. The panels take as much memory as the matrices they copy; a model that never
  // runs on the CPU, or a type read from its rows (CpuDeviceOptions::llama_order), never pays it.
  void ensure_panels(const std::function<bool(TensorType)>& wanted = {}) const;
  size_t panel_bytes() const;  // bytes of panels made so far
  // Called by ensure_panels() after each matrix it repacks with the bytes repacked so far and in
  // all (`chorus` shows a progress line from it when stderr is a terminal). Set it before the
  // engine is made; it is called on the thread that makes the engine.
  void on_panel_progress(std::function<void(size_t done, size_t total)> progress) const;

 private:
  std::vector<std::unique_ptr<float[]>> owned_;  // converted vectors
  struct Panels;
  static std::shared_ptr<Panels> new_panels();
  std::shared_ptr<Panels> panels_ = new_panels();
};

}  // namespace chorus
