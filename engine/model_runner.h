// One forward pass of a Llama-family model over a batch of tokens from many sequences at once.
// Each token carries its sequence and position; every matrix product takes all tokens of the
// step together, so the weights are read once per step however many sequences run.
//
// Per layer:  h = rmsnorm(x) -> q,k,v = h W{q,k,v} -> rope(q,k) -> write k,v to the paged KV
//             cache -> attention (causal within the sequence) -> x += out W_o
//             h = rmsnorm(x) -> x += (silu(h W_gate) * h W_up) W_down
// then logits = rmsnorm(x) W_out for the tokens that ask for them.
//
// Hybrid models (qwen35) replace the attention block of most layers by a Gated DeltaNet layer
// (engine/model_runner_linear.cpp): a recurrent state per sequence instead of a KV cache, built
// for a view from the blocks' summaries (engine/linear_state.h).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache.h"
#include "engine/linear_state.h"
#include "engine/model_config.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant.h"

namespace chorus {

class CpuDevice;

struct BatchToken {
  TokenId token = 0;
  int32_t pos = 0;      // position in the sequence (block) it is written to, block-local
  int32_t seq = 0;      // the sequence (block) it is written to: index into forward()'s seqs
  bool logits = false;  // compute next-token logits after this token
  int32_t view = -1;    // index into forward()'s views, or -1: the token sees its own sequence only
};

// A view: the sequences (blocks) a token attends to, in order, as indices into forward()'s
// seqs. The token's own sequence may appear anywhere in it (else it is attended after the
// others). Context blocks are seen as they were at the start of the step: tokens that other
// entries of the same batch write to them become visible on the next step.
using View = std::vector<int32_t>;

// The most blocks one view may hold (each is a segment of the attention call).
inline constexpr int kMaxViewBlocks = 64;

// One block a token attends: the block (index into forward()'s seqs), how many of its positions,
// and the rotation of the query for it (the token's view position minus the block's offset).
struct AttendSegment {
  int32_t block;
  int64_t n_kv;
  float rotation;
};

// The checks every runner's forward() makes: batch size, token ids, sequence and view indices,
// positions covered by their sequence's pages. Errors are Errc::invalid_argument, saying which.
Status check_forward_args(const ModelConfig& config, int max_tokens, std::span<const BatchToken> batch,
                          std::span<SequenceKv* const> seqs, std::span<const View> views);

// The segments each token of a batch attends, in view order. Context blocks are seen as they
// were at the start of the step; the token's own block up to and including its position.
// REQUIRES: forward()'s argument checks hold (indices in range).
std::vector<std::vector<AttendSegment>> plan_attention(std::span<const BatchToken> batch,
                                                       std::span<SequenceKv* const> seqs,
                                                       std::span<const View> views);

// Hybrid models: the tokens one sequence writes in a step and the blocks its view puts
// before it (as forward()'s seqs indices, with their lengths at the start of the step). The CPU
// runner and the CUDA runner (engine/cuda_linear.h) plan their linear layers alike.
struct LinearGroup {
  int32_t seq = 0;
  std::vector<int64_t> tokens;  // batch indices, in position order
  std::vector<std::pair<int32_t, int64_t>> prefix;
  std::vector<std::pair<int32_t, int64_t>> suffix;  // blocks the view puts after it
  int64_t start = 0;            // the sequence's length at the start of the step
  // How its view state is had: the cached one (the view is unchanged), composed afresh from
  // the blocks' summaries (then cached), or not at all: one token's output read through the
  // view's blocks with its query (a block before it is written in this step too, so the view
  // changes every step; no O(dk^3) work).
  enum class Mode { cached, recompose, chain } mode = Mode::cached;
  std::vector<std::pair<uint64_t, int64_t>> key;  // the view's key (LinearState::run_key)
  size_t n_base = 0;            // chain: prefix blocks before the first one written this step
  bool compose = false;         // needs prefix[0, n_compose) composed this step
  size_t n_compose = 0;
  // Per layer: the tokens' raw inputs, (g, beta), factors, and with a suffix the queries
  // through it (y, c: the output is S y + c).
  std::vector<float> x, gb, q, k, v, y, c;
};

// Groups a step's tokens by the sequence they write and checks them: one view per sequence,
// positions appended in order, context blocks read at the length their linear state holds.
// `own` gives each written sequence a state of its own first (made, or copied when shared), so
// that the keys name it; then each group's mode: the cached view state, recomposed, or (with
// chain_reads, one token, a block before it written in this step too) read through the query.
Status plan_linear_groups(bool chain_reads, std::span<const BatchToken> batch,
                          std::span<SequenceKv* const> seqs, std::span<const View> views,
                          const std::function<Status(SequenceKv& s, const LinearGroup& g)>& own,
                          std::vector<LinearGroup>* groups);
// The CPU's `own`: LinearState::create, or clone() when another holder shares it.
std::function<Status(SequenceKv&, const LinearGroup&)> own_linear_state(const ModelConfig& c);
// After the step: each written sequence's state and cached view now hold its new tokens.
void finish_linear_groups(std::vector<LinearGroup>& groups, std::span<SequenceKv* const> seqs);

class ModelRunner {
 public:
  // REQUIRES: config, weights and device outlive the runner. Scratch for `max_tokens` tokens
  // per forward is allocated here, once.
  // f32_activations: every product runs on f32 activations (CpuKernels::gemm_f32) instead of
  // int8 ones — slower, but free of the activation rounding that makes quantized models'
  // logits sensitive to last-bit differences (used by tests of mathematical equivalences).
  ModelRunner(const ModelConfig& config, const Weights& weights, CpuDevice& device, int max_tokens,
              bool f32_activations = false);

  int max_tokens() const { return max_tokens_; }

  // Hybrid models, wall time: composing view states from block summaries (and how many times a
  // sequence's state was composed, per layer), and the tokens' convolution with the reads of a
  // view through queries (blocks after the writer, or the whole view in chain mode).
  struct LinearStats {
    double compose_seconds = 0;
    int64_t compositions = 0;
    double factor_seconds = 0;
  };
  const LinearStats& linear_stats() const { return linear_stats_; }
  // Whether a one-token step whose view changed reads the view through its query (default)
  // instead of composing the view's state; off for tests and measurements of the other path.
  void set_chain_reads(bool on) { chain_reads_ = on; }
  void reset_linear_stats() { linear_stats_ = {}; }

  // Runs the batch. REQUIRES: batch.size() <= max_tokens(); each sequence's pages cover
  // every position in the batch; a sequence's tokens appear in increasing position order and
  // its earlier positions are already in the cache. Writes K/V of every token and raises each
  // sequence's n_tokens. Logits of the tokens with `logits` set go to `logits_out`
  // ([n_logits, n_vocab], batch order). Errors: Errc::invalid_argument for a bad token id,
  // position or sequence index.
  // With views, a token at block-local position p of block w whose view places w at offset o_w
  // sits at view position i = o_w + p; for each block b at offset o_b its query is rotated by
  // i - o_b (keys stay rotated at block-local positions: nothing is re-encoded).
  Status forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, KvCache& kv,
                 float* logits_out, std::span<const View> views = {});

 private:
  struct Product {
    const WeightMatrix* w;
    float* y;  // [n_tokens, w->rows]
  };
  struct GemmChunk {
    GemmFn fn;
    GemmArgs args;
  };
  // REQUIRES: every product's matrix has the same number of columns (x's width).
  void gemm(std::initializer_list<Product> products, const float* x, int64_t n_tokens);
  void feed_forward(const LayerWeights& L, int64_t n_tokens);
  void moe_feed_forward(const LayerWeights& L, int64_t n_tokens);  // engine/model_runner_moe.cpp
  // One Gated DeltaNet layer over the batch: h_ (normed input) -> h_ (the layer's output).
  void linear_layer(int layer, int64_t n_tokens, std::span<SequenceKv* const> seqs,
                    std::vector<LinearGroup>& groups);
  template <class Fn>
  void per_token(int64_t n_tokens, const Fn& fn);

  const ModelConfig& c_;
  const Weights& w_;
  CpuDevice& dev_;
  int max_tokens_;
  bool f32_activations_;
  // Scratch, [max_tokens, width]:
  std::vector<float> x_, h_, q_, k_, v_, att_, gate_, up_;
  std::vector<float> rope_cs_;  // [n_rot] (cos, sin) pairs for the token being rotated
  std::vector<float> q_seg_;    // [view tokens, segments, q_dim] queries rotated per segment
  std::vector<BlockQ8> xq_;    // [max_tokens, widest / 32] activations of the integer kernels
  std::vector<GemmChunk> chunks_;  // reused by gemm()
  std::vector<float> scratch_;  // attention scores, [n_threads, longest sequence]
  LinearStats linear_stats_;
  bool chain_reads_ = true;
  std::vector<float> qg_;
  // Mixture of experts: router probabilities [T][n_expert], each token's slots (expert, weight)
  // [T][n_expert_used], slot outputs [T][n_expert_used][n_embd], gathered rows [T][n_embd].
  std::vector<float> moe_logits_, moe_slot_weight_, moe_slot_out_, moe_rows_;
  std::vector<int> moe_slot_expert_;
  std::vector<int64_t> moe_first_, moe_slots_;  // slots bucketed by expert: [first[e], first[e+1])       // [max_tokens, 2 q_dim] query and gate (attention with an output gate)
  // Linear layers: [max_tokens, width] projections, factors and outputs.
  std::vector<float> l_qkv_, l_z_, l_beta_, l_alpha_, l_ba_, l_gb_, l_o_;
  std::vector<std::unique_ptr<GdnBlockOps>> gdn_ops_;  // one per thread
  std::vector<std::vector<float>> prefix_S_, prefix_tails_;  // composed prefixes of one step
};

}  // namespace chorus
