// What a block keeps for a hybrid model's Gated DeltaNet layers, so that any view can build its
// recurrent state from the blocks it lists without running their tokens again (AsyncLLM's
// affine composition, made exact at block boundaries).
//
// A GDN layer turns each token's raw input x_t = [q | k | v] (before the causal convolution of
// width K) into (q_t, k_t, v_t) with a convolution over x_{t-K+1..t}, so the first K-1 tokens of
// a block depend on the block before it in the view; everything after them does not. Per layer
// a block therefore keeps:
//   head: the raw inputs, log-decays and write strengths of its first min(n, K-1) tokens
//         (turned into k, v when a view places the block after another one),
//   body: the affine map S -> S A + B of its remaining tokens, compact (their k, v, g, beta)
//         while there are fewer than dk of them, dense (A [Hv][dk][dk], B [Hv][dv][dk]) after,
//   tail: the raw inputs of its last min(n, K-1) tokens (the next block's convolution input).
// A view's state is S = 0, then each block in order: its head tokens through the recurrence
// (convolved with the tail so far), then its body map. This equals running the view's tokens
// contiguously through the layer, given each token's layer input.
//
// The block being written also caches the state of the view it is written under (run_S,
// run_tail, keyed by the identity and length of every block before it): the decode hot path
// steps that state one token at a time and recomposes only when the view changes.
//
// Memory per block and linear layer, floats: head 2(K-1)·conv_dim + 2(K-1)·Hv (head and
// tail), body min(n_body·(Hk·dk + Hv·dv + 2·Hv), Hv·(dk² + dv·dk)), and for a block being
// written run_S Hv·dv·dk + (K-1)·conv_dim. See docs/engine.md for a Qwen3.5-9B-shaped model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/model/model_config.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chorus {

struct LinearLayerState {
  std::vector<float> head_x;   // [min(n, K-1)][conv_dim] raw inputs of the first tokens
  std::vector<float> head_gb;  // [min(n, K-1)][Hv][2] their (g, beta)
  std::vector<float> tail_x;   // [min(n, K-1)][conv_dim] raw inputs of the last tokens
  int64_t n_body = 0;          // tokens in the body
  bool dense = false;
  std::vector<float> body_k;    // compact: [n_body][Hk][dk] L2-normalised keys
  std::vector<float> body_v;    // compact: [n_body][Hv][dv]
  std::vector<float> body_gb;   // compact: [n_body][Hv][2]
  std::vector<float> A;         // dense: [Hv][dk][dk]
  std::vector<float> B;         // dense: [Hv][dv][dk]
  std::vector<float> run_S;     // [Hv][dv][dk] state of the cached view (write blocks only)
  std::vector<float> run_tail;  // [K-1][conv_dim] last raw inputs of the cached view
  // Chain reads: the state and tail of the view's unchanging first blocks (LinearState::base_key).
  std::vector<float> base_S, base_tail;
};

struct LinearState {
  uint64_t id = 0;       // unique for the life of the process: a key never matches a new state
  int64_t n_tokens = 0;  // tokens it summarises (a view must read the block at this length)
  std::vector<LinearLayerState> layers;  // [n_layer]; attention layers stay empty
  // The view run_S/run_tail were composed for: (id, n_tokens) of each block before this one,
  // then this block's own (id, n_tokens).
  std::vector<std::pair<uint64_t, int64_t>> run_key;
  std::vector<std::pair<uint64_t, int64_t>> base_key;  // the blocks base_S was composed from
  // The linear-state slot it holds (engine/forward/linear_slots.h): its number (its deleter gives
  // the slot back when the last holder lets go) and the pool it belongs to. On a GPU
  // (engine/forward/cuda/cuda_linear.h) the state lives in the slot instead of `layers`; on the
  // CPU a slot is counted only, and null when the engine sets no limit. Null too while its block
  // is paused.
  std::shared_ptr<const int32_t> slot;
  const void* slot_owner = nullptr;
  // A GPU state out of its slot (its block offloaded, CudaRunner::offload_linear): the slot's
  // contents, in host memory until the restore puts them in a slot again.
  std::vector<float> saved_slot;
  bool broken = false;       // a GPU step that wrote it failed part-way: undefined (CudaLinear::abandon)
  int64_t device_dense = 0;  // body tokens in the device slot's summary; the rest are buffered

  static std::shared_ptr<LinearState> create(const ModelConfig& c);
  // A private copy (new id), for copy-on-write. A device state's copy has no slot: the CUDA
  // runner copies its slots itself.
  std::shared_ptr<LinearState> clone() const;
  size_t bytes() const;
  // Frees the cached view state (run_S, base_S and their tails; the keys with them) of every
  // layer: for a block nobody is writing. The summary stays.
  void drop_view_cache();
};

// y <- A_t y and c += B_t y for one token's map (see GdnBlockOps::query_through). O(dk).
void token_map_on_query(const float* k, const float* v, float g, float beta, float* y, float* c, int dk);

// Helpers for one linear layer. `conv_w` is the layer's [K][conv_dim] taps (LayerWeights::conv),
// `eps` the norm eps.
class GdnBlockOps {
 public:
  GdnBlockOps(const GdnConfig& d, float eps, const CpuKernels& kernels);

  // Turns n raw inputs into the recurrence's inputs: convolution with the K-1 inputs before
  // them (prev, [K-1][conv_dim]), SiLU, split, L2-normalised k (and q; the 1/sqrt(dk) scale is
  // applied to the layer's outputs, as llama.cpp does).
  // q may be nullptr. q, k: [n][Hk][dk]; v: [n][Hv][dv].
  void factors(const float* conv_w, const float* prev, const float* x, int n, float* q, float* k, float* v);

  // Runs block `b`'s layer state (holding n_b tokens) into a view's state S, value heads
  // [h0, h1) (h1 < 0: all), its first tokens convolved with `tail`, the tail before it (then
  // advance_tail). `zero` says S is still all zero (lets a dense body be copied instead of
  // multiplied) and is updated.
  void apply_block(const float* conv_w, const LinearLayerState& b, int64_t n_b, float* S, const float* tail,
                   bool* zero, int h0 = 0, int h1 = -1);

  // Reading a state S' = S * M_1 * ... * M_m (blocks after S, each map's first tokens convolved
  // with the tail before it, `tail` for the first) with a query q: since (S A + B) q = S (A q) + B q,
  // carrying the query backwards through the blocks gives S' q = S y + c without forming S'
  // (O(dk^2) per dense block and head, O(dk) per token of a compact one). y, c: [Hv][dk], in and
  // out: start with y = each value head's query, c = 0.
  void query_through(const float* conv_w, std::span<const std::pair<const LinearLayerState*, int64_t>> blocks,
                     const float* tail, float* y, float* c);

  // The tail after block b (holding n_b tokens) follows `tail`.
  void advance_tail(const LinearLayerState& b, int64_t n_b, float* tail) const;

  // Appends n tokens at block positions [n_before, n_before + n) to the block's layer state:
  // their raw inputs x [n][conv_dim], factors k, v and gb [n][Hv][2].
  void append(LinearLayerState& b, int64_t n_before, const float* x, const float* k, const float* v,
              const float* gb, int n);

  // append() in three parts, so that the heads' folds can run on several threads:
  // begin_append keeps the head and tail inputs and a compact body, and says what each head of
  // a dense body must fold; fold_head folds one value head (heads are independent; any thread's
  // GdnBlockOps); end_append counts the folded tokens. The bits are append()'s.
  struct Fold {
    std::vector<float> old_k, old_v, old_gb;  // a compact body turning dense: its tokens first
    int64_t n_old = 0;
    const float *k = nullptr, *v = nullptr, *gb = nullptr;  // then these m body tokens
    int64_t m = 0;
    bool active() const { return n_old + m > 0; }
  };
  Fold begin_append(LinearLayerState& b, int64_t n_before, const float* x, const float* k, const float* v,
                    const float* gb, int n);
  void fold_head(LinearLayerState& b, const Fold& f, int h);
  static void end_append(LinearLayerState& b, const Fold& f) { b.n_body += f.n_old + f.m; }

  // tail <- the last K-1 rows of (tail ++ x[0..n)).
  void shift_tail(float* tail, const float* x, int64_t n) const;

  // Per-thread buffers for the caller (CpuRunner's linear layers).
  // Body length from which a block's body is kept dense.
  int dense_from() const { return d_.head_dim; }

 private:
  void fold_tokens(LinearLayerState& b, int h, const float* k, const float* v, const float* gb, int64_t m);
  GdnConfig d_;
  float eps_;
  const CpuKernels& K_;
  std::vector<float> conv_, tmp_, scratch_, kh_, vh_, g_, beta_, run_tail_, heads_;
};

}  // namespace chorus
