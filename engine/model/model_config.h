// Hyper-parameters of a model, read from GGUF metadata. Kept apart from the weights (Weights)
// and from per-step state (CpuRunner), llama2.c-style.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace chorus {

class GgufFile;

enum class RopeLayout {
  rope_normal,  // rotate adjacent pairs (2i, 2i+1): llama-family GGUFs (q/k permuted by converters)
  rope_neox,    // rotate (i, i + n_rot/2): qwen2, qwen3, ...
};

// Gated DeltaNet (linear attention) shapes of a hybrid model's recurrent layers (qwen35).
struct GdnConfig {
  int conv_kernel = 0;      // K: causal convolution width (ssm.conv_kernel)
  int head_dim = 0;         // dk = dv (ssm.state_size)
  int n_k_heads = 0;        // Hk (ssm.group_count)
  int n_v_heads = 0;        // Hv (ssm.time_step_rank), a multiple of Hk
  bool tiled_heads = true;  // v-head h reads k-head h % Hk (qwen35 GGUFs); else h / (Hv / Hk)

  int key_dim() const { return n_k_heads * head_dim; }
  int value_dim() const { return n_v_heads * head_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }  // channels of [q | k | v]
  int k_head_of(int v_head) const {
    return tiled_heads ? v_head % n_k_heads : v_head / (n_v_heads / n_k_heads);
  }
};

struct ModelConfig {
  std::string arch;  // general.architecture, e.g. "llama"
  std::string name;  // general.name
  int n_vocab = 0;
  int n_embd = 0;  // model width
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;     // n_embd / n_head unless the file says otherwise
  int n_ff = 0;         // feed-forward width
  int n_ctx_train = 0;  // context the model was trained for
  float norm_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;  // position scaling: rope.scaling.factor ("linear" and "yarn")
  int n_rot = 0;            // rotated dimensions per head (usually head_dim)
  // YaRN (rope.scaling.type "yarn", as llama.cpp applies it): pairs below the correction
  // dimension for yarn_beta_fast rotations over yarn_orig_ctx positions keep their unscaled
  // angle, those beyond the one for yarn_beta_slow take the scaled angle, ramped between; cos
  // and sin times rope_mscale.
  bool rope_yarn = false;
  int yarn_orig_ctx = 0;  // rope.scaling.original_context_length (default: context_length)
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;  // rope.scaling.yarn_beta_fast / _slow
  float yarn_ext_factor = 1.0f;                         // rope.scaling.yarn_ext_factor
  // cos and sin of every angle are multiplied by this: rope.scaling.attn_factor (default 1),
  // and with YaRN (yarn_ext_factor not 0) times 1 + 0.1 ln(rope_scale) when rope_scale > 1.
  float rope_mscale = 1.0f;
  RopeLayout rope_layout = RopeLayout::rope_normal;
  bool tied_output = false;       // output projection is the token embedding
  bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE (qwen3, qwen35)
  bool attn_output_gate = false;  // attn_q also yields a per-head gate: out *= sigmoid(gate) (qwen35)

  // Hybrid models: which layers are Gated DeltaNet layers (no KV cache; a recurrent state per
  // block instead) and, for the others, their slot in the KV cache.
  std::vector<bool> linear_layer;  // [n_layer]; all false for attention-only models
  std::vector<int> kv_layer;       // [n_layer]: KV-cache slot, -1 for a linear layer
  int n_kv_layer = 0;              // layers with a KV cache
  GdnConfig gdn;                   // shapes of the linear layers, when there are any

  // Mixture of experts (qwen35moe): per layer a softmax router over n_expert expert FFNs, the
  // top n_expert_used by probability with their probabilities renormalised (times
  // expert_weights_scale when set), plus a shared expert gated by sigmoid(w . x).
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;                // width of an expert FFN
  int n_ff_shexp = 0;              // width of the shared expert FFN
  float expert_weights_scale = 0;  // 0 or 1: none

  // Gemma 3: most layers attend a sliding window of n_swa view positions (a query at view
  // position i sees keys at view positions i - n_swa + 1 .. i) with their own RoPE base and no
  // position scaling; every sliding_window_pattern-th layer attends everything. The token
  // embedding is scaled by sqrt(n_embd); the attention output and the feed-forward output are
  // each RMS-normed before their residual add; the feed-forward is GeGLU.
  std::vector<bool> swa_layer;     // [n_layer]; all false without sliding windows
  int n_swa = 0;                   // attention.sliding_window
  float rope_base_swa = 10000.0f;  // rope.freq_base_swa
  float embd_scale = 1.0f;         // the token embedding is multiplied by this
  float attn_scale = 0.0f;         // q.k scale; 0: 1 / sqrt(head_dim)
  bool post_norms = false;         // post_attention_norm and post_ffw_norm (gemma3)
  bool geglu = false;              // ffn: gelu(gate) * up instead of silu(gate) * up
  float logit_softcap = 0.0f;      // final_logit_softcapping: logits = c tanh(logits / c); 0: none

  bool hybrid() const { return n_kv_layer < n_layer; }
  bool is_swa(int layer) const { return !swa_layer.empty() && swa_layer[static_cast<size_t>(layer)]; }
  float q_scale() const {
    return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  bool moe() const { return n_expert > 0; }
  bool is_linear(int layer) const { return linear_layer[static_cast<size_t>(layer)]; }

  int kv_dim() const { return n_head_kv * head_dim; }  // floats of K (or V) per token per layer
  int q_dim() const { return n_head * head_dim; }

  // Errors: Errc::unsupported naming the architecture (and the supported ones) or the rope
  // scaling type; Errc::not_found / bad_format naming the metadata key.
  static Result<ModelConfig> from_gguf(const GgufFile& gguf);

  // RoPE angle of pair i at position p: p * rope_theta_scale()^i / rope_scale (YaRN ramps that
  // towards p * rope_theta_scale()^i between yarn_corr_dims(); Llama 3's rope_freqs divide it).
  float rope_theta_scale() const;
  float rope_theta_scale_swa() const;  // the same with rope_base_swa (sliding-window layers)
  // YaRN's correction dimensions: the pair indices (as floats) where its ramp starts and ends.
  std::pair<float, float> yarn_corr_dims() const;
};

// Architectures chorus can run: "llama" (also SmolLM, Llama 2/3), "qwen2", "qwen3" (dense),
// "qwen35" (Qwen3.5 dense hybrid: Gated DeltaNet layers and gated attention layers) and
// "qwen35moe" (the same with mixture-of-experts feed-forward layers) and "qwen3next"
// (Qwen3-Next: the same as qwen35moe with another value-head order and a packed ssm_ba) and
// "gemma3" (Gemma 3: sliding-window and global attention layers, see above).
const std::vector<std::string>& supported_architectures();

}  // namespace chorus
