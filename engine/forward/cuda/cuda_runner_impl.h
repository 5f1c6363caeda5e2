// CudaRunner's state (engine/forward/cuda/cuda_runner.h), shared by its two files: cuda_runner.cpp
// (creation and the step) and cuda_runner_pages.cpp (KV pages and linear states to and from the
// host). Internal to the engine.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "device/cuda_device.h"
#include "engine/forward/cuda/cuda_linear.h"
#include "engine/forward/cuda/cuda_moe.h"
#include "engine/forward/cuda/cuda_op.h"
#include "engine/forward/cuda/cuda_runner.h"
#include "engine/forward/cuda/cuda_step_plan.h"
#include "engine/forward/cuda/cuda_weights.h"

#include "kernels/cuda/ops.h"

namespace chorus {

namespace cuda_detail {

struct Layer {
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // q/k/v biases (qwen2), or none
  CudaMat wq, wk, wv, wo, gate, up, down;
  void *k_pool = nullptr, *v_pool = nullptr;  // null for a linear layer (no KV)
};

}  // namespace cuda_detail

struct CudaRunner::Impl {
  using Layer = cuda_detail::Layer;
  using Mat = CudaMat;
  using bf16_bits = cuda::bf16_bits;
  const ModelConfig& c;
  CudaDevice& dev;
  CudaRunnerOptions opts;
  std::vector<Layer> layers;
  Mat embd, output;
  const float* output_norm = nullptr;
  int64_t page_stride = 0;
  int64_t page_cap = 0;  // entries of the view page table
  // Activations [max_tokens][...].
  float *x = nullptr, *h = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr, *gate = nullptr,
        *up = nullptr, *logits = nullptr;
  bf16_bits* xb = nullptr;
  // Step tables.
  int32_t *ids = nullptr, *pos = nullptr, *write_page = nullptr, *write_slot = nullptr, *page_ids = nullptr;
  cuda::AttnSegment* segs = nullptr;
  cuda::AttnToken* tokens = nullptr;
  int32_t* logit_rows = nullptr;    // [max_tokens] tokens whose logits a step computes
  int n_logit_rows = -1;            // -1: every token's (graphed steps); else how many
  cuda::AttnTile* tiles = nullptr;  // [max_tokens] prefill tiles of one step
  bool tiled = false;               // this step attends in tiles (plus its single tokens)
  int n_tiles = 0;
  int32_t* single_rows = nullptr;           // [max_tokens] the single tokens of a tiled step ...
  cuda::AttnToken* single_table = nullptr;  // ... and their token entries
  float *q_single = nullptr,
        *att_single = nullptr;  // [max_tokens][q_dim] their queries and outputs, compacted
  // Attention output gates: attn_q's rows [max_tokens][2 q_dim] (query and gate per head), and the gates.
  float *qg = nullptr, *attn_gate = nullptr;
  int n_single = 0;
  std::unique_ptr<CudaLinear> linear;  // hybrid models: the Gated DeltaNet layers
  std::unique_ptr<CudaMoe> moe;        // mixture-of-experts models: their feed-forward layers
  cuda::SampleRow* samples = nullptr;  // [max_tokens] draws of one step
  int32_t* sampled = nullptr;          // [max_tokens] their tokens

  int64_t mark0 = 0;  // the pool as it was before create(): given back by the destructor

  Impl(const ModelConfig& config, CudaDevice& d, const CudaRunnerOptions& o)
      : c(config), dev(d), opts(o), mark0(d.mark()) {}
  // CUDA graphs by padded step size and, for hybrid models, CudaLinear::graph_key(): at most
  // kMaxGraphs (a step whose key is new after that launches directly), and why graphs were
  // turned off if a capture failed.
  std::map<std::array<int64_t, 8>, void*> graphs;
  static constexpr size_t kMaxGraphs = 64;
  std::string graph_error;

  ~Impl() {
    for (auto& [size, g] : graphs) dev.destroy_graph(g);
    dev.reset_to(mark0);
  }

  // create()'s and forward()'s phases (cuda_runner.cpp).
  Status upload_weights(const Weights& w);
  Result<Layer> upload_layer(const LayerWeights& L, int l);
  Status take_buffers();
  Result<CudaStepPlan> plan_step(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                                 std::span<const View> views,
                                 std::span<const std::optional<PlannedDraw>> draws, bool have_tokens_out);
  Status put_tables(const CudaStepPlan& p);
  Result<bool> run_step(const CudaStepPlan& p, std::span<SequenceKv* const> seqs);
  void* graph_for(const CudaStepPlan& p, std::string* capture_error);
  Status sample(const CudaStepPlan& p);
  Status read_back(std::span<const BatchToken> batch, const CudaStepPlan& p, float* logits_out,
                   TokenId* tokens_out);

  template <class T>
  Status take_into(T** dst, int64_t n, const char* what) {
    auto p = take<T>(n, what);
    if (!p) return p.error();
    *dst = *p;
    return Status::success();
  }
  template <class T>
  Result<T*> take(int64_t n, const char* what) {
    auto p = dev.alloc(n * static_cast<int64_t>(sizeof(T)), what);
    if (!p) return p.error();
    return static_cast<T*>(*p);
  }

  // `in` [n][cols] to bf16 in xb: once for all the products that read it.
  Status stage(const float* in, int64_t n, int64_t cols) {
    return cuda_detail::op(cuda::to_bf16(in, xb, n * cols, dev.stream()), "to_bf16");
  }
  // out [n][w.rows] = xb [n][w.cols] W^T.
  Status gemm(const Mat& w, float* out, int64_t n) {
    return cuda_gemm_bf16(dev, w.w, xb, out, w.rows, n, w.cols);
  }

  // Every launch of one step of T tokens (tables already on the device); nothing synchronizes,
  // so it can be captured.
  Status launch(int T) {
    void* st = dev.stream();
    const int E = c.n_embd, FF = c.n_ff;
    CHORUS_TRY(cuda_detail::op(cuda::embed_rows(embd.w, embd.rows, ids, T, E, x, st), "token_embd"));
    for (int l = 0; l < c.n_layer; ++l) {
      const Layer& L = layers[static_cast<size_t>(l)];
      CHORUS_TRY(cuda_detail::op(cuda::rmsnorm(x, L.attn_norm, h, T, E, c.norm_eps, st), "attn_norm"));
      if (c.is_linear(l)) {
        CHORUS_TRY(linear->layer(l, h, T));
      } else {
        CHORUS_TRY(attention_block(L, T));
      }
      CHORUS_TRY(cuda_detail::op(cuda::add(x, h, int64_t{T} * E, st), "residual"));
      CHORUS_TRY(cuda_detail::op(cuda::rmsnorm(x, L.ffn_norm, h, T, E, c.norm_eps, st), "ffn_norm"));
      if (moe) {
        CHORUS_TRY(moe->layer(l, h, x, T));
        continue;
      }
      CHORUS_TRY(stage(h, T, E));
      CHORUS_TRY(gemm(L.gate, gate, T));
      CHORUS_TRY(gemm(L.up, up, T));
      CHORUS_TRY(cuda_detail::op(cuda::swiglu(gate, up, gate, int64_t{T} * FF, st), "swiglu"));
      CHORUS_TRY(stage(gate, T, FF));
      CHORUS_TRY(gemm(L.down, h, T));
      CHORUS_TRY(cuda_detail::op(cuda::add(x, h, int64_t{T} * E, st), "residual"));
    }
    CHORUS_TRY(cuda_detail::op(cuda::rmsnorm(x, output_norm, h, T, E, c.norm_eps, st), "output_norm"));
    if (n_logit_rows < 0) {
      CHORUS_TRY(stage(h, T, E));
      CHORUS_TRY(gemm(output, logits, T));
    } else if (n_logit_rows > 0) {  // only the rows asked for (logits row i = the i-th such token)
      CHORUS_TRY(cuda_detail::op(cuda::rows_to_bf16(h, logit_rows, n_logit_rows, E, xb, st), "output rows"));
      CHORUS_TRY(gemm(output, logits, n_logit_rows));
    }
    return Status::success();
  }

  // An attention layer's block: h [T][E] (normed input) -> h (its output, before the residual).
  Status attention_block(const Layer& L, int T) {
    void* st = dev.stream();
    const int E = c.n_embd, KVD = c.kv_dim(), HD = c.head_dim;
    const bool neox = c.rope_layout == RopeLayout::rope_neox;
    const float theta_scale = c.rope_theta_scale(), freq_scale = 1.0f / c.rope_scale;
    CHORUS_TRY(stage(h, T, E));
    if (c.attn_output_gate) {  // each head's query, then its gate: split them
      CHORUS_TRY(gemm(L.wq, qg, T));
      CHORUS_TRY(
          cuda_detail::op(cuda::split_query_gate(qg, q, attn_gate, T, c.n_head, HD, st), "attn_q gate"));
    } else {
      CHORUS_TRY(gemm(L.wq, q, T));
    }
    CHORUS_TRY(gemm(L.wk, k, T));
    CHORUS_TRY(gemm(L.wv, v, T));
    if (L.bq) CHORUS_TRY(cuda_detail::op(cuda::add_rows(q, L.bq, T, c.q_dim(), st), "attn_q.bias"));
    if (L.bk) CHORUS_TRY(cuda_detail::op(cuda::add_rows(k, L.bk, T, KVD, st), "attn_k.bias"));
    if (L.bv) CHORUS_TRY(cuda_detail::op(cuda::add_rows(v, L.bv, T, KVD, st), "attn_v.bias"));
    if (L.q_norm)
      CHORUS_TRY(cuda_detail::op(cuda::rmsnorm(q, L.q_norm, q, T * c.n_head, HD, c.norm_eps, st), "q_norm"));
    if (L.k_norm)
      CHORUS_TRY(
          cuda_detail::op(cuda::rmsnorm(k, L.k_norm, k, T * c.n_head_kv, HD, c.norm_eps, st), "k_norm"));
    CHORUS_TRY(cuda_detail::op(
        cuda::rope(k, pos, T, c.n_head_kv, HD, c.n_rot, theta_scale, freq_scale, neox, st), "rope"));
    CHORUS_TRY(cuda_detail::op(cuda::write_kv(L.k_pool, L.v_pool, opts.kv_bf16, page_stride, KVD, write_page,
                                              write_slot, k, v, T, st),
                               "write_kv"));
    cuda::AttnArgs a;
    a.q = q;
    a.k_pool = L.k_pool;
    a.v_pool = L.v_pool;
    a.kv_bf16 = opts.kv_bf16;
    a.page_stride = page_stride;
    a.kv_stride = KVD;
    a.page_ids = page_ids;
    a.segs = segs;
    a.tokens = tokens;
    a.n_tokens = T;
    a.n_heads = c.n_head;
    a.n_kv_heads = c.n_head_kv;
    a.head_dim = HD;
    a.n_rot = c.n_rot;
    a.theta_scale = theta_scale;
    a.freq_scale = freq_scale;
    a.neox = neox;
    a.scale = 1.0f / std::sqrt(static_cast<float>(HD));
    a.out = att;
    if (!tiled) {
      CHORUS_TRY(cuda_detail::op(cuda::attention(a, st), "attention"));
    } else {  // runs in tiles; single tokens compacted through the per-token kernel and put back
      CHORUS_TRY(cuda_detail::op(cuda::attention_tiled(a, tiles, n_tiles, st), "attention"));
      if (n_single > 0) {
        const int QD = c.q_dim();
        CHORUS_TRY(
            cuda_detail::op(cuda::gather_rows(q, single_rows, n_single, QD, q_single, st), "attention"));
        cuda::AttnArgs one = a;
        one.q = q_single;
        one.tokens = single_table;
        one.n_tokens = n_single;
        one.out = att_single;
        CHORUS_TRY(cuda_detail::op(cuda::attention(one, st), "attention"));
        CHORUS_TRY(
            cuda_detail::op(cuda::scatter_rows(att_single, single_rows, n_single, QD, att, st), "attention"));
      }
    }
    if (c.attn_output_gate)
      CHORUS_TRY(
          cuda_detail::op(cuda::sigmoid_mul(att, attn_gate, int64_t{T} * c.q_dim(), st), "attention gate"));
    CHORUS_TRY(stage(att, T, L.wo.cols));
    return gemm(L.wo, h, T);
  }

  // A step table to the device in stream order (forward() keeps `v` alive until its sync).
  template <class T>
  Status put(T* dst, const std::vector<T>& v) {
    if (v.empty()) return Status::success();
    return dev.upload_async(dst, v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
  }
};

}  // namespace chorus
