#include "engine/model/weights.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "base/big_buffer.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/panel.h"

namespace chorus {

struct Weights::Panels {
  std::mutex m;                    // one ensure_panels() at a time
  std::vector<BigBuffer> buffers;  // one per ensure_panels() call that packed any
  size_t bytes = 0;
  std::function<void(size_t, size_t)> progress;
};

void Weights::on_panel_progress(std::function<void(size_t, size_t)> progress) const {
  panels_->progress = std::move(progress);
}

std::shared_ptr<Weights::Panels> Weights::new_panels() {
  return std::make_shared<Panels>();
}

void Weights::ensure_panels(const std::function<bool(TensorType)>& wanted) const {
  Panels& store = *panels_;
  std::lock_guard<std::mutex> lock(store.m);
  // Not the embedding: its rows are only looked up (a tied output is a copy of it and gets them).
  std::vector<const WeightMatrix*> all = {&output};
  for (const LayerWeights& L : layers) {
    for (const WeightMatrix* m :
         {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_qkv, &L.w_z, &L.w_beta, &L.w_alpha, &L.w_ba, &L.w_ssm_out,
          &L.router, &L.sh_gate, &L.sh_up, &L.sh_down, &L.w_gate, &L.w_up, &L.w_down})
      all.push_back(m);
    for (const auto* v : {&L.exp_gate, &L.exp_up, &L.exp_down})
      for (const WeightMatrix& m : *v) all.push_back(&m);
  }
  auto todo = [&](const WeightMatrix* m) {
    return m->data != nullptr && m->panels == nullptr && panel_type(m->type) && (!wanted || wanted(m->type));
  };
  // Matrices that share their data share one panel set.
  std::map<const uint8_t*, const WeightMatrix*> done;
  // All of them in one buffer, on huge pages where the kernel gives them: a decode step reads
  // every panel, and on 4 KiB pages that is a TLB miss every 4 KiB.
  auto padded = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  size_t arena = 0, total = store.bytes;
  for (const WeightMatrix* m : all)
    if (todo(m) && !done.count(m->data)) {
      const size_t bytes = panel_layout(m->type, m->rows, m->cols).bytes();
      arena += padded(bytes);
      total += bytes;
      done[m->data] = m;
    }
  done.clear();
  if (arena == 0) return;
  BigBuffer buffer = allocate_big(arena);
  if (!buffer) return;  // no memory: the matrices keep the row kernels
  auto* next = reinterpret_cast<uint8_t*>(buffer.get());
  store.buffers.push_back(std::move(buffer));
  for (const WeightMatrix* m : all) {
    if (!todo(m)) continue;
    if (auto it = done.find(m->data); it != done.end()) {
      m->panels = it->second->panels;
      m->panel_bytes = it->second->panel_bytes;
      continue;
    }
    const PanelLayout l = panel_layout(m->type, m->rows, m->cols);
    uint8_t* buf = next;
    next += padded(l.bytes());
    // Split over the cores: a 1B model's panels are most of a gigabyte.
    const int n = std::max(1, std::min<int>(static_cast<int>(std::thread::hardware_concurrency()), 8));
    std::vector<std::thread> workers;
    for (int i = 0; i < n; ++i)
      workers.emplace_back([&, i] {
        pack_panels(l, m->data, m->row_bytes, buf, l.n_panels * i / n, l.n_panels * (i + 1) / n);
      });
    for (std::thread& w : workers) w.join();
    m->panel_bytes = l.panel_bytes;
    m->panels = buf;
    store.bytes += l.bytes();
    done[m->data] = m;
    if (store.progress) store.progress(store.bytes, total);
  }
}

size_t Weights::panel_bytes() const {
  return panels_->bytes;
}

namespace {

std::string shape_str(int64_t a, int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

}  // namespace

namespace {

// Reads the model's tensors by name, checking their shapes and types; vectors of another type
// than f32 are dequantized into buffers kept in `owned`.
struct TensorReader {
  const GgufFile& g;
  const ModelConfig& c;
  std::vector<std::unique_ptr<float[]>>& owned;

  // GGUF shapes list the contiguous dimension first: a matrix [rows, cols] is ne = {cols, rows}.
  Status matrix(const std::string& name, int64_t rows, int64_t cols, WeightMatrix* out) const {
    const GgufTensor* t = g.find_tensor(name);
    if (t == nullptr) return make_error(Errc::not_found, g.name() + ": tensor '" + name + "' is missing");
    if (rows < 1 || cols < 1)  // the configuration's checks keep sizes positive; this keeps it so here
      return make_error(Errc::bad_format, g.name() + ": tensor '" + name + "' would be " +
                                              shape_str(cols, rows) +
                                              ": the model's sizes give an empty matrix");
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
      return make_error(Errc::bad_format, g.name() + ": tensor '" + name + "' has shape " +
                                              t->shape_string() + ", expected " + shape_str(cols, rows));
    if (!can_dequantize(t->type))
      return make_error(Errc::unsupported, g.name() + ": tensor '" + name + "' has type " +
                                               std::string(tensor_type_name(t->type)) +
                                               ", which chorus cannot compute with yet");
    if (cols % 32 != 0)
      return make_error(Errc::unsupported, g.name() + ": tensor '" + name + "' has " + std::to_string(cols) +
                                               " columns, not a multiple of 32");
    *out = WeightMatrix{t->type, rows, cols, t->data, t->n_bytes / static_cast<size_t>(rows)};
    return Status::success();
  }
  Status vec(const std::string& name, int64_t n, bool required, const float** out) const {
    const GgufTensor* t = g.find_tensor(name);
    if (t == nullptr) {
      if (!required) return Status::success();
      return make_error(Errc::not_found, g.name() + ": tensor '" + name + "' is missing");
    }
    if (static_cast<int64_t>(t->n_elements) != n)
      return make_error(Errc::bad_format, g.name() + ": tensor '" + name + "' has " +
                                              std::to_string(t->n_elements) + " elements, expected " +
                                              std::to_string(n));
    if (t->type == TensorType::f32) {
      *out = reinterpret_cast<const float*>(t->data);  // the loader guarantees 32-byte alignment
      return Status::success();
    }
    if (!can_dequantize(t->type) || n % tensor_type_info(t->type).block_elems != 0)
      return make_error(Errc::unsupported, g.name() + ": tensor '" + name + "' has type " +
                                               std::string(tensor_type_name(t->type)));
    auto buf = std::make_unique<float[]>(static_cast<size_t>(n));
    dequantize_row(t->type, t->data, buf.get(), n);
    *out = buf.get();
    owned.push_back(std::move(buf));
    return Status::success();
  }
  // Expert matrices: one 3-d tensor [cols, rows, n_expert], cut into n_expert matrices.
  Status experts(const std::string& name, int64_t rows, int64_t cols, std::vector<WeightMatrix>* out) const {
    const GgufTensor* t = g.find_tensor(name);
    if (t == nullptr) {
      const std::string layer = name.substr(0, name.find("ffn_"));
      const bool fused = g.find_tensor(layer + "ffn_gate_up_exps.weight") != nullptr;
      return make_error(Errc::not_found,
                        g.name() + ": tensor '" + name + "' is missing" +
                            (fused ? " (the file has the fused " + layer +
                                         "ffn_gate_up_exps.weight, which chorus does not read yet)"
                                   : ""));
    }
    if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != c.n_expert)
      return make_error(Errc::bad_format, g.name() + ": tensor '" + name + "' has shape " +
                                              t->shape_string() + ", expected [" + std::to_string(cols) +
                                              ", " + std::to_string(rows) + ", " +
                                              std::to_string(c.n_expert) + "]");
    if (!can_dequantize(t->type) || cols % 32 != 0)
      return make_error(Errc::unsupported, g.name() + ": tensor '" + name + "' (" +
                                               std::string(tensor_type_name(t->type)) + ", " +
                                               std::to_string(cols) + " columns) cannot be computed with");
    const size_t row_bytes = t->n_bytes / static_cast<size_t>(rows * c.n_expert);
    for (int e = 0; e < c.n_expert; ++e)
      out->push_back(
          WeightMatrix{t->type, rows, cols, t->data + static_cast<size_t>(e) * rows * row_bytes, row_bytes});
    return Status::success();
  }
};

// A Gated DeltaNet layer's projections, convolution (taps transposed to [K][conv_dim]) and norms.
Status read_linear_layer(const TensorReader& r, const std::string& p, LayerWeights& l) {
  const ModelConfig& c = r.c;
  const GdnConfig& d = c.gdn;
  const int64_t K = d.conv_kernel;
  CHORUS_TRY(r.matrix(p + "attn_qkv.weight", d.conv_dim(), c.n_embd, &l.w_qkv));
  CHORUS_TRY(r.matrix(p + "attn_gate.weight", d.value_dim(), c.n_embd, &l.w_z));
  if (c.arch == "qwen3next") {
    if (r.g.find_tensor(p + "ssm_in.weight") != nullptr && r.g.find_tensor(p + "attn_qkv.weight") == nullptr)
      return make_error(Errc::unsupported,
                        r.g.name() + ": tensor '" + p +
                            "ssm_in.weight' is the packed [q k v z] "
                            "projection of older converters; chorus reads attn_qkv and "
                            "attn_gate (convert the model again with a current llama.cpp)");
    CHORUS_TRY(r.matrix(p + "ssm_ba.weight", 2 * d.n_v_heads, c.n_embd, &l.w_ba));
  } else {
    CHORUS_TRY(r.matrix(p + "ssm_beta.weight", d.n_v_heads, c.n_embd, &l.w_beta));
    CHORUS_TRY(r.matrix(p + "ssm_alpha.weight", d.n_v_heads, c.n_embd, &l.w_alpha));
  }
  const float* taps = nullptr;  // [conv_dim][K] as stored
  CHORUS_TRY(r.vec(p + "ssm_conv1d.weight", d.conv_dim() * K, true, &taps));
  if (const GgufTensor* t = r.g.find_tensor(p + "ssm_conv1d.weight"); t->ne[0] != K)
    return make_error(Errc::bad_format, r.g.name() + ": tensor '" + p + "ssm_conv1d.weight' has shape " +
                                            t->shape_string() + ", expected " + shape_str(K, d.conv_dim()));
  auto transposed = std::make_unique<float[]>(static_cast<size_t>(d.conv_dim() * K));
  for (int64_t c = 0; c < d.conv_dim(); ++c)
    for (int64_t j = 0; j < K; ++j) transposed[static_cast<size_t>(j * d.conv_dim() + c)] = taps[c * K + j];
  l.conv = transposed.get();
  r.owned.push_back(std::move(transposed));
  CHORUS_TRY(r.vec(p + "ssm_a", d.n_v_heads, true, &l.ssm_a));
  CHORUS_TRY(r.vec(p + "ssm_dt.bias", d.n_v_heads, true, &l.dt_bias));
  CHORUS_TRY(r.vec(p + "ssm_norm.weight", d.head_dim, true, &l.ssm_norm));
  CHORUS_TRY(r.matrix(p + "ssm_out.weight", c.n_embd, d.value_dim(), &l.w_ssm_out));
  return Status::success();
}

Status read_attention_layer(const TensorReader& r, const std::string& p, LayerWeights& l) {
  const ModelConfig& c = r.c;
  CHORUS_TRY(r.matrix(p + "attn_q.weight", c.attn_output_gate ? 2 * c.q_dim() : c.q_dim(), c.n_embd, &l.wq));
  CHORUS_TRY(r.matrix(p + "attn_k.weight", c.kv_dim(), c.n_embd, &l.wk));
  CHORUS_TRY(r.matrix(p + "attn_v.weight", c.kv_dim(), c.n_embd, &l.wv));
  CHORUS_TRY(r.matrix(p + "attn_output.weight", c.n_embd, c.q_dim(), &l.wo));
  CHORUS_TRY(r.vec(p + "attn_q.bias", c.q_dim(), false, &l.bq));
  CHORUS_TRY(r.vec(p + "attn_k.bias", c.kv_dim(), false, &l.bk));
  CHORUS_TRY(r.vec(p + "attn_v.bias", c.kv_dim(), false, &l.bv));
  CHORUS_TRY(r.vec(p + "attn_q_norm.weight", c.head_dim, c.qk_norm, &l.q_norm));
  CHORUS_TRY(r.vec(p + "attn_k_norm.weight", c.head_dim, c.qk_norm, &l.k_norm));
  return Status::success();
}

// The feed-forward: dense, or experts with a shared expert (MoE).
Status read_feed_forward(const TensorReader& r, const std::string& p, LayerWeights& l) {
  const ModelConfig& c = r.c;
  if (c.moe()) {
    CHORUS_TRY(r.matrix(p + "ffn_gate_inp.weight", c.n_expert, c.n_embd, &l.router));
    CHORUS_TRY(r.experts(p + "ffn_gate_exps.weight", c.n_ff_exp, c.n_embd, &l.exp_gate));
    CHORUS_TRY(r.experts(p + "ffn_up_exps.weight", c.n_ff_exp, c.n_embd, &l.exp_up));
    CHORUS_TRY(r.experts(p + "ffn_down_exps.weight", c.n_embd, c.n_ff_exp, &l.exp_down));
    CHORUS_TRY(r.vec(p + "ffn_gate_inp_shexp.weight", c.n_embd, true, &l.sh_router));
    CHORUS_TRY(r.matrix(p + "ffn_gate_shexp.weight", c.n_ff_shexp, c.n_embd, &l.sh_gate));
    CHORUS_TRY(r.matrix(p + "ffn_up_shexp.weight", c.n_ff_shexp, c.n_embd, &l.sh_up));
    CHORUS_TRY(r.matrix(p + "ffn_down_shexp.weight", c.n_embd, c.n_ff_shexp, &l.sh_down));
    return Status::success();
  }
  CHORUS_TRY(r.matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd, &l.w_gate));
  CHORUS_TRY(r.matrix(p + "ffn_up.weight", c.n_ff, c.n_embd, &l.w_up));
  CHORUS_TRY(r.matrix(p + "ffn_down.weight", c.n_embd, c.n_ff, &l.w_down));
  return Status::success();
}

}  // namespace

Result<Weights> Weights::from_gguf(const GgufFile& g, const ModelConfig& c) {
  Weights w;
  const TensorReader r{g, c, w.owned_};
  CHORUS_TRY(r.matrix("token_embd.weight", c.n_vocab, c.n_embd, &w.token_embd));
  CHORUS_TRY(r.vec("output_norm.weight", c.n_embd, true, &w.output_norm));
  CHORUS_TRY(r.vec("rope_freqs.weight", c.n_rot / 2, false, &w.rope_freqs));
  if (c.tied_output)
    w.output = w.token_embd;
  else
    CHORUS_TRY(r.matrix("output.weight", c.n_vocab, c.n_embd, &w.output));
  // The Qwen3.5 / Qwen3-Next family names the pre-FFN norm post_attention_norm.
  const bool qwen35_family = c.arch == "qwen35" || c.arch == "qwen35moe" || c.arch == "qwen3next";
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    CHORUS_TRY(r.vec(p + "attn_norm.weight", c.n_embd, true, &l.attn_norm));
    CHORUS_TRY(c.is_linear(i) ? read_linear_layer(r, p, l) : read_attention_layer(r, p, l));
    CHORUS_TRY(r.vec(p + (qwen35_family ? "post_attention_norm.weight" : "ffn_norm.weight"), c.n_embd, true,
                     &l.ffn_norm));
    if (c.post_norms) {  // gemma3: the norms after attention and after the feed-forward
      CHORUS_TRY(r.vec(p + "post_attention_norm.weight", c.n_embd, true, &l.attn_post_norm));
      CHORUS_TRY(r.vec(p + "post_ffw_norm.weight", c.n_embd, true, &l.ffn_post_norm));
    }
    CHORUS_TRY(read_feed_forward(r, p, l));
  }
  return w;
}

}  // namespace chorus
