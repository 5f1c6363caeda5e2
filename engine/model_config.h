// Hyper-parameters of a model, read from GGUF metadata. Kept apart from the weights (Weights)
// and from per-step state (ModelRunner), llama2.c-style.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

class GgufFile;

enum class RopeLayout {
  rope_normal,  // rotate adjacent pairs (2i, 2i+1): llama-family GGUFs (q/k permuted by converters)
  rope_neox,    // rotate (i, i + n_rot/2): qwen2, qwen3, ...
};

struct ModelConfig {
  std::string arch;          // general.architecture, e.g. "llama"
  std::string name;          // general.name
  int n_vocab = 0;
  int n_embd = 0;            // model width
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;          // n_embd / n_head unless the file says otherwise
  int n_ff = 0;              // feed-forward width
  int n_ctx_train = 0;       // context the model was trained for
  float norm_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;   // linear position scaling (rope.scaling.factor for "linear")
  int n_rot = 0;             // rotated dimensions per head (usually head_dim)
  RopeLayout rope_layout = RopeLayout::rope_normal;
  bool tied_output = false;  // output projection is the token embedding
  bool qk_norm = false;      // per-head RMSNorm of q and k before RoPE (qwen3)

  int kv_dim() const { return n_head_kv * head_dim; }  // floats of K (or V) per token per layer
  int q_dim() const { return n_head * head_dim; }

  // Errors: Errc::unsupported naming the architecture (and the supported ones) or the rope
  // scaling type; Errc::not_found / bad_format naming the metadata key.
  static Result<ModelConfig> from_gguf(const GgufFile& gguf);

  // RoPE angle of pair i at position p: p * rope_theta_scale()^i / rope_scale.
  float rope_theta_scale() const;
};

// Architectures chorus can run: "llama" (also SmolLM, Llama 2/3), "qwen2" and "qwen3" (dense).
const std::vector<std::string>& supported_architectures();

}  // namespace chorus
