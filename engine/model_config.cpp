#include "engine/model_config.h"

#include <cmath>

#include "engine/gguf.h"

namespace chorus {

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> archs = {"llama", "qwen2", "qwen3"};
  return archs;
}

namespace {

Result<int> get_int_key(const GgufFile& g, const std::string& key) {
  auto v = g.get_uint(key);
  if (!v) return v.error();
  if (*v == 0 || *v > (1u << 30))
    return make_error(Errc::bad_format, g.name() + ": metadata '" + key + "' = " + std::to_string(*v) +
                                            " is out of range");
  return static_cast<int>(*v);
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
#define CHORUS_INT(field, key)               \
  {                                          \
    auto v = get_int_key(g, p + key);        \
    if (!v) return v.error();                \
    c.field = *v;                            \
  }
  CHORUS_INT(n_embd, "embedding_length");
  CHORUS_INT(n_layer, "block_count");
  CHORUS_INT(n_head, "attention.head_count");
  CHORUS_INT(n_ff, "feed_forward_length");
  CHORUS_INT(n_ctx_train, "context_length");
#undef CHORUS_INT
  c.n_head_kv = c.n_head;
  if (g.find(p + "attention.head_count_kv")) {
    auto v = get_int_key(g, p + "attention.head_count_kv");
    if (!v) return v.error();
    c.n_head_kv = *v;
  }
  if (c.n_head % c.n_head_kv != 0)
    return make_error(Errc::bad_format, g.name() + ": head_count " + std::to_string(c.n_head) +
                                            " is not a multiple of head_count_kv " + std::to_string(c.n_head_kv));
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
  if (g.find(p + "rope.scaling.type")) {
    auto t = g.get_string(p + "rope.scaling.type");
    if (!t) return t.error();
    if (*t == "linear") {
      auto f = g.get_float(p + "rope.scaling.factor");
      if (!f) return f.error();
      if (*f > 0) c.rope_scale = static_cast<float>(*f);
    } else if (*t != "none") {
      return make_error(Errc::unsupported, g.name() + ": rope scaling '" + std::string(*t) +
                                               "' is not supported yet (supported: none, linear)");
    }
  }
  c.rope_layout = c.arch == "llama" ? RopeLayout::rope_normal : RopeLayout::rope_neox;
  const GgufTensor* emb = g.find_tensor("token_embd.weight");
  if (emb == nullptr) return make_error(Errc::not_found, g.name() + ": tensor 'token_embd.weight' is missing");
  c.n_vocab = static_cast<int>(emb->ne[1]);
  c.tied_output = g.find_tensor("output.weight") == nullptr;
  c.qk_norm = c.arch == "qwen3";
  return c;
}

float ModelConfig::rope_theta_scale() const {
  return std::pow(rope_base, -2.0f / static_cast<float>(n_rot));
}

}  // namespace chorus
