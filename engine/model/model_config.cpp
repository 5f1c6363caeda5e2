#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/model/gguf.h"

namespace chorus {

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> archs = {"llama",     "qwen2",     "qwen3", "qwen35",
                                                 "qwen35moe", "qwen3next", "gemma3"};
  return archs;
}

namespace {

Result<int> get_int_key(const GgufFile& g, const std::string& key) {
  auto v = g.get_uint(key);
  if (!v) return v.error();
  if (*v == 0 || *v > (1u << 30))
    return make_error(Errc::bad_format,
                      g.name() + ": metadata '" + key + "' = " + std::to_string(*v) + " is out of range");
  return static_cast<int>(*v);
}

bool integer_type(GgufValueType t) {
  return t != GgufValueType::string && t != GgufValueType::array && t != GgufValueType::f32 &&
         t != GgufValueType::f64;
}

// A per-layer array of flags (integers or booleans) at `key` into `out` [n_layer]; `what` ends
// the error when it is not one.
Status read_layer_flags(const GgufFile& g, const std::string& key, int n_layer, const std::string& what,
                        std::vector<bool>& out) {
  const GgufValue* v = g.find(key);
  const auto* arr = v ? std::get_if<GgufArray>(&v->v) : nullptr;
  if (arr == nullptr || arr->count != static_cast<uint64_t>(n_layer) || !integer_type(arr->elem_type))
    return make_error(Errc::bad_format, g.name() + ": " + key + " must be " + what);
  for (int l = 0; l < n_layer; ++l)
    out[static_cast<size_t>(l)] = arr->elem_type == GgufValueType::boolean
                                      ? arr->data[l] != 0
                                      : arr->int_at(static_cast<uint64_t>(l)) != 0;
  return Status::success();
}

// Which layers are recurrent: an explicit per-layer list (newer converters), else every layer but
// each full_attention_interval-th.
Status read_recurrent_layers(const GgufFile& g, const std::string& p, ModelConfig& c) {
  if (g.find(p + "attention.recurrent_layers")) {
    CHORUS_TRY(read_layer_flags(g, p + "attention.recurrent_layers", c.n_layer,
                                "an array of " + std::to_string(c.n_layer) + " integers", c.linear_layer));
  } else {
    int interval = 4;
    if (g.find(p + "full_attention_interval")) {
      auto v = get_int_key(g, p + "full_attention_interval");
      if (!v) return v.error();
      interval = *v;
    }
    for (int l = 0; l < c.n_layer; ++l) c.linear_layer[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }
  return Status::success();
}

// Interleaved multi-section RoPE (IMROPE): with text positions (the same position in the t, h and w
// streams, 0 in the fourth) it is NeoX RoPE over n_rot dims, provided no rotated pair falls in the
// fourth stream. Anything else needs image positions chorus does not have.
Status check_imrope(const GgufFile& g, const std::string& p, const ModelConfig& c) {
  auto bad = [&](const std::string& what) { return make_error(Errc::bad_format, g.name() + ": " + what); };
  if (g.find(p + "rope.dimension_sections")) {
    const GgufValue* v = g.find(p + "rope.dimension_sections");
    const auto* arr = std::get_if<GgufArray>(&v->v);
    if (arr == nullptr || arr->count != 4 || !integer_type(arr->elem_type))
      return bad(p + "rope.dimension_sections must be an array of 4 integers");
    int64_t sec[4], total = 0;
    for (int i = 0; i < 4; ++i) {
      sec[i] = arr->int_at(static_cast<uint64_t>(i));
      if (sec[i] < 0 || sec[i] > 4096)
        return bad(p + "rope.dimension_sections has " + std::to_string(sec[i]));
      total += sec[i];
    }
    if (total <= 0) return bad(p + "rope.dimension_sections are all zero");
    for (int pair = 0; pair < c.n_rot / 2; ++pair) {
      const int64_t s = pair % total;
      const bool text =
          (s % 3 == 0 && s < 3 * sec[0]) || (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2]);
      if (!text)
        return make_error(Errc::unsupported,
                          g.name() + ": " + p + "rope.dimension_sections [" + std::to_string(sec[0]) + ", " +
                              std::to_string(sec[1]) + ", " + std::to_string(sec[2]) + ", " +
                              std::to_string(sec[3]) + "] rotate pair " + std::to_string(pair) +
                              " by the fourth position stream; chorus runs text positions only");
    }
  }
  return Status::success();
}

Status read_hybrid(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.attn_output_gate = true;
  GdnConfig& d = c.gdn;
  auto key = [&](const char* k, int* out) -> Status {
    auto v = get_int_key(g, p + k);
    if (!v) return v.error();
    *out = *v;
    return Status::success();
  };
  int inner = 0;
  for (auto [k, out] : {std::pair{"ssm.conv_kernel", &d.conv_kernel},
                        {"ssm.state_size", &d.head_dim},
                        {"ssm.group_count", &d.n_k_heads},
                        {"ssm.time_step_rank", &d.n_v_heads},
                        {"ssm.inner_size", &inner}})
    if (Status s = key(k, out); !s.ok()) return s;
  // qwen35 converters reorder the value heads so that head h reads key head h % Hk; qwen3next
  // files keep the original order, h reads key head h / (Hv / Hk).
  d.tiled_heads = c.arch != "qwen3next";
  auto bad = [&](const std::string& what) { return make_error(Errc::bad_format, g.name() + ": " + what); };
  // Bounds that keep every size product (conv_dim, Hv x dk x dk) far inside int.
  for (auto [k, v, most] : {std::tuple{"ssm.state_size", d.head_dim, 1024},
                            {"ssm.group_count", d.n_k_heads, 4096},
                            {"ssm.time_step_rank", d.n_v_heads, 4096}})
    if (v > most)
      return make_error(Errc::unsupported, g.name() + ": " + p + k + " " + std::to_string(v) +
                                               " is larger than " + std::to_string(most) +
                                               ", which chorus supports");
  if (d.n_v_heads % d.n_k_heads != 0)
    return bad(p + "ssm.time_step_rank " + std::to_string(d.n_v_heads) +
               " (value heads) is not a multiple of " + p + "ssm.group_count " + std::to_string(d.n_k_heads) +
               " (key heads)");
  if (inner != d.n_v_heads * d.head_dim)
    return bad(p + "ssm.inner_size " + std::to_string(inner) +
               " is not value heads x state size = " + std::to_string(d.n_v_heads * d.head_dim));
  if (d.conv_kernel < 2 || d.conv_kernel > 16)
    return make_error(Errc::unsupported, g.name() + ": " + p + "ssm.conv_kernel " +
                                             std::to_string(d.conv_kernel) + " is not supported (2..16)");
  CHORUS_TRY(read_recurrent_layers(g, p, c));
  return check_imrope(g, p, c);
}

Status read_experts(const GgufFile& g, const std::string& p, ModelConfig& c) {
  auto key = [&](const std::string& k, bool required, int fallback, int* out) -> Status {
    if (!required && !g.find(p + k)) {
      *out = fallback;
      return Status::success();
    }
    auto v = get_int_key(g, p + k);
    if (!v) return v.error();
    *out = *v;
    return Status::success();
  };
  if (Status s = key("expert_count", true, 0, &c.n_expert); !s.ok()) return s;
  if (Status s = key("expert_used_count", true, 0, &c.n_expert_used); !s.ok()) return s;
  if (c.n_expert_used > c.n_expert || c.n_expert > 1024)
    return make_error(Errc::bad_format, g.name() + ": " + p + "expert_used_count " +
                                            std::to_string(c.n_expert_used) + " with expert_count " +
                                            std::to_string(c.n_expert) + " (used <= count <= 1024)");
  if (c.n_ff == 0 && !g.find(p + "expert_feed_forward_length"))
    return make_error(Errc::not_found,
                      g.name() + ": metadata '" + p + "expert_feed_forward_length' is missing");
  if (Status s = key("expert_feed_forward_length", false, c.n_ff / std::max(1, c.n_expert_used), &c.n_ff_exp);
      !s.ok())
    return s;
  if (Status s = key("expert_shared_feed_forward_length", false, c.n_ff, &c.n_ff_shexp); !s.ok()) return s;
  if (c.n_ff_shexp == 0)
    return make_error(Errc::not_found,
                      g.name() + ": metadata '" + p + "expert_shared_feed_forward_length' is missing");
  if (g.find(p + "expert_weights_scale")) {
    auto v = g.get_float(p + "expert_weights_scale");
    if (!v) return v.error();
    c.expert_weights_scale = static_cast<float>(*v);
  }
  return Status::success();
}

// Gemma 3's sliding windows, their RoPE base, the embedding and attention scales, and the
// final logit soft-capping, with llama.cpp's defaults (models/gemma3.cpp): a pattern of 6 (every
// 6th layer global), a sliding-window RoPE base of 10000, q scaled by 1/sqrt(head_dim) (the 27B's
// 62 layers by 1/sqrt(n_embd / n_head)).
Status read_gemma3(const GgufFile& g, const std::string& p, ModelConfig& c) {
  auto bad = [&](const std::string& what) { return make_error(Errc::bad_format, g.name() + ": " + what); };
  if (c.rope_yarn)  // its sliding-window layers would need YaRN without the scaling
    return make_error(Errc::unsupported,
                      g.name() + ": " + p + "rope.scaling.type 'yarn' is not supported for gemma3");
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.post_norms = true;
  c.geglu = true;
  c.qk_norm = true;
  c.attn_scale = c.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head))
                                 : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (g.find(p + "final_logit_softcapping")) {
    auto v = g.get_float(p + "final_logit_softcapping");
    if (!v) return v.error();
    c.logit_softcap = static_cast<float>(*v);
  }
  if (!g.find(p + "attention.sliding_window")) return Status::success();
  auto w = g.get_uint(p + "attention.sliding_window");
  if (!w) return w.error();
  if (*w == 0) return Status::success();  // no sliding windows
  if (*w > (1u << 30)) return bad(p + "attention.sliding_window " + std::to_string(*w) + " is out of range");
  c.n_swa = static_cast<int>(*w);
  c.swa_layer.assign(static_cast<size_t>(c.n_layer), false);
  const std::string key = p + "attention.sliding_window_pattern";
  const GgufValue* v = g.find(key);
  if (v != nullptr && v->type == GgufValueType::array) {  // one flag per layer
    CHORUS_TRY(read_layer_flags(
        g, key, c.n_layer, "an integer or an array of " + std::to_string(c.n_layer) + " flags", c.swa_layer));
  } else {
    int pattern = 6;
    if (v != nullptr) {
      auto n = g.get_uint(key);
      if (!n) return n.error();
      if (*n > 65536) return bad(key + " " + std::to_string(*n) + " is out of range");
      pattern = static_cast<int>(*n);
    }
    // Layer l slides unless it is the last of its group of `pattern` (0: every layer slides).
    for (int l = 0; l < c.n_layer; ++l)
      c.swa_layer[static_cast<size_t>(l)] = pattern == 0 || l % pattern < pattern - 1;
  }
  if (g.find(p + "rope.freq_base_swa")) {
    auto b = g.get_float(p + "rope.freq_base_swa");
    if (!b) return b.error();
    c.rope_base_swa = static_cast<float>(*b);
  }
  return Status::success();
}

}  // namespace

namespace {

// Heads: how many (and of keys and values), their size, and the rotated part of it.
Status read_heads(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.n_head_kv = c.n_head;
  if (g.find(p + "attention.head_count_kv")) {
    auto v = get_int_key(g, p + "attention.head_count_kv");
    if (!v) return v.error();
    c.n_head_kv = *v;
  }
  if (c.n_head % c.n_head_kv != 0)
    return make_error(Errc::bad_format, g.name() + ": head_count " + std::to_string(c.n_head) +
                                            " is not a multiple of head_count_kv " +
                                            std::to_string(c.n_head_kv));
  c.head_dim = c.n_embd / c.n_head;
  if (g.find(p + "attention.key_length")) {
    auto v = get_int_key(g, p + "attention.key_length");
    if (!v) return v.error();
    c.head_dim = *v;
  }
  if (g.find(p + "attention.value_length")) {
    auto v = get_int_key(g, p + "attention.value_length");
    if (!v) return v.error();
    if (*v != c.head_dim)
      return make_error(Errc::unsupported, g.name() + ": attention.value_length " + std::to_string(*v) +
                                               " differs from key_length " + std::to_string(c.head_dim) +
                                               " (chorus needs equal key and value head sizes)");
  }
  if (c.head_dim % 2 != 0 || c.head_dim > 512)
    return make_error(Errc::unsupported, g.name() + ": head dimension " + std::to_string(c.head_dim) +
                                             " is not supported (even, at most 512)");
  c.n_rot = c.head_dim;
  if (g.find(p + "rope.dimension_count")) {
    auto v = get_int_key(g, p + "rope.dimension_count");
    if (!v) return v.error();
    c.n_rot = *v;
  }
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    return make_error(Errc::bad_format, g.name() + ": rope.dimension_count " + std::to_string(c.n_rot) +
                                            " does not fit the head dimension " + std::to_string(c.head_dim));
  return Status::success();
}

// The norms' epsilon and the rotary embedding's base and scaling.
Status read_rope_and_norm(const GgufFile& g, const std::string& p, ModelConfig& c) {
  if (g.find(p + "attention.layer_norm_rms_epsilon")) {
    auto v = g.get_float(p + "attention.layer_norm_rms_epsilon");
    if (!v) return v.error();
    c.norm_eps = static_cast<float>(*v);
  }
  if (g.find(p + "rope.freq_base")) {
    auto v = g.get_float(p + "rope.freq_base");
    if (!v) return v.error();
    c.rope_base = static_cast<float>(*v);
  }
  // A float key if the file has it.
  auto optional_float = [&](const std::string& key, float& out) -> Status {
    if (!g.find(p + key)) return Status::success();
    auto v = g.get_float(p + key);
    if (!v) return v.error();
    out = static_cast<float>(*v);
    return Status::success();
  };
  CHORUS_TRY(optional_float("rope.scaling.attn_factor", c.rope_mscale));
  if (g.find(p + "rope.scaling.type")) {
    auto t = g.get_string(p + "rope.scaling.type");
    if (!t) return t.error();
    if (*t == "linear" || *t == "yarn") {
      float f = 0.0f;
      CHORUS_TRY(optional_float("rope.scaling.factor", f));
      if (f > 0) c.rope_scale = f;
    } else if (*t != "none") {
      return make_error(Errc::unsupported, g.name() + ": " + p + "rope.scaling.type '" + std::string(*t) +
                                               "' is not supported (supported: none, linear, yarn)");
    }
    c.rope_yarn = *t == "yarn";
  }
  if (c.rope_yarn) {
    float log_mul = 0.0f;
    CHORUS_TRY(optional_float("rope.scaling.yarn_log_multiplier", log_mul));
    if (log_mul != 0.0f)
      return make_error(Errc::unsupported, g.name() + ": " + p + "rope.scaling.yarn_log_multiplier " +
                                               std::to_string(log_mul) + " is not supported (only 0)");
    CHORUS_TRY(optional_float("rope.scaling.yarn_beta_fast", c.yarn_beta_fast));
    CHORUS_TRY(optional_float("rope.scaling.yarn_beta_slow", c.yarn_beta_slow));
    CHORUS_TRY(optional_float("rope.scaling.yarn_ext_factor", c.yarn_ext_factor));
    c.yarn_orig_ctx = c.n_ctx_train;
    if (g.find(p + "rope.scaling.original_context_length")) {
      auto v = get_int_key(g, p + "rope.scaling.original_context_length");
      if (!v) return v.error();
      c.yarn_orig_ctx = static_cast<int>(*v);
    }
    if (c.yarn_orig_ctx <= 0)
      return make_error(Errc::bad_format, g.name() + ": " + p + "rope.scaling.original_context_length " +
                                              std::to_string(c.yarn_orig_ctx) + " must be positive");
    if (c.rope_scale > 1.0f && c.yarn_ext_factor != 0.0f)
      c.rope_mscale *= 1.0f + 0.1f * std::log(c.rope_scale);
  }
  return Status::success();
}

}  // namespace

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile& g) {
  ModelConfig c;
  auto arch = g.get_string("general.architecture");
  if (!arch) return arch.error();
  c.arch = std::string(*arch);
  bool known = false;
  std::string list;
  for (const auto& a : supported_architectures()) {
    known |= a == c.arch;
    list += (list.empty() ? "" : ", ") + a;
  }
  if (!known)
    return make_error(Errc::unsupported, g.name() + ": architecture '" + c.arch +
                                             "' is not supported (supported: " + list + ")");
  if (auto n = g.get_string("general.name")) c.name = std::string(*n);
  const std::string p = c.arch + ".";
#define CHORUS_INT(field, key)        \
  {                                   \
    auto v = get_int_key(g, p + key); \
    if (!v) return v.error();         \
    c.field = *v;                     \
  }
  CHORUS_INT(n_embd, "embedding_length");
  CHORUS_INT(n_layer, "block_count");
  CHORUS_INT(n_head, "attention.head_count");
  const bool experts = c.arch == "qwen35moe" || c.arch == "qwen3next";
  if (!experts || g.find(p + "feed_forward_length")) CHORUS_INT(n_ff, "feed_forward_length");
  CHORUS_INT(n_ctx_train, "context_length");
#undef CHORUS_INT
  for (auto [k, v, most] : {std::tuple{"attention.head_count", c.n_head, 65536},
                            {"block_count", c.n_layer, 65536},
                            {"embedding_length", c.n_embd, 1 << 20}})
    if (v > most)
      return make_error(Errc::unsupported, g.name() + ": " + p + k + " " + std::to_string(v) +
                                               " is larger than " + std::to_string(most) +
                                               ", which chorus supports");
  CHORUS_TRY(read_heads(g, p, c));
  CHORUS_TRY(read_rope_and_norm(g, p, c));
  c.rope_layout = c.arch == "llama" ? RopeLayout::rope_normal : RopeLayout::rope_neox;
  const GgufTensor* emb = g.find_tensor("token_embd.weight");
  if (emb == nullptr)
    return make_error(Errc::not_found, g.name() + ": tensor 'token_embd.weight' is missing");
  // An embedding of no rows (or of more than an int holds) is no vocabulary: found by the fuzzer,
  // whose zero-row embedding made every output matrix empty and its row size a division by zero.
  if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > (1 << 30))
    return make_error(Errc::bad_format, g.name() + ": tensor 'token_embd.weight' has shape " +
                                            emb->shape_string() +
                                            ": not [n_embd, n_vocab] with a vocabulary");
  c.n_vocab = static_cast<int>(emb->ne[1]);
  c.tied_output = g.find_tensor("output.weight") == nullptr;
  const bool hybrid = c.arch == "qwen35" || c.arch == "qwen35moe" || c.arch == "qwen3next";
  c.qk_norm = c.arch == "qwen3" || hybrid;
  c.linear_layer.assign(static_cast<size_t>(c.n_layer), false);
  if (hybrid) {
    if (Status s = read_hybrid(g, p, c); !s.ok()) return s.error();
  }
  if (experts) {
    if (Status s = read_experts(g, p, c); !s.ok()) return s.error();
  }
  if (c.arch == "gemma3") {
    if (Status s = read_gemma3(g, p, c); !s.ok()) return s.error();
  }
  c.kv_layer.assign(static_cast<size_t>(c.n_layer), -1);
  c.n_kv_layer = 0;
  for (int l = 0; l < c.n_layer; ++l)
    if (!c.is_linear(l)) c.kv_layer[static_cast<size_t>(l)] = c.n_kv_layer++;
  return c;
}

std::pair<float, float> ModelConfig::yarn_corr_dims() const {
  // The pair whose angle turns `rotations` times over yarn_orig_ctx positions.
  const float pi = 3.14159265358979323846f;
  auto dim = [&](float rotations) {
    return static_cast<float>(n_rot) * std::log(static_cast<float>(yarn_orig_ctx) / (rotations * 2.0f * pi)) /
           (2.0f * std::log(rope_base));
  };
  return {std::max(0.0f, std::floor(dim(yarn_beta_fast))),
          std::min(static_cast<float>(n_rot - 1), std::ceil(dim(yarn_beta_slow)))};
}

float ModelConfig::rope_theta_scale() const {
  return std::pow(rope_base, -2.0f / static_cast<float>(n_rot));
}

float ModelConfig::rope_theta_scale_swa() const {
  return std::pow(rope_base_swa, -2.0f / static_cast<float>(n_rot));
}

}  // namespace chorus
