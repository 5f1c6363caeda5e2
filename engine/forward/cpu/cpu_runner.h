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
// (engine/forward/cpu/cpu_runner_linear.cpp): a recurrent state per sequence instead of a KV cache, built
// for a view from the blocks' summaries (engine/forward/linear_state.h).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/forward/batch.h"
#include "engine/forward/kv_cache.h"
#include "engine/forward/linear_plan.h"
#include "engine/forward/linear_state.h"
#include "engine/forward/runner.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant.h"

namespace chorus {

class CpuDevice;

class CpuRunner final : public Runner {
 public:
  // REQUIRES: config, weights and device outlive the runner. Scratch for `max_tokens` tokens
  // per forward is allocated here, once.
  // f32_activations: every product runs on f32 activations (CpuKernels::gemm_f32) instead of
  // int8 ones — slower, but free of the activation rounding that makes quantized models'
  // logits sensitive to last-bit differences (used by tests of mathematical equivalences).
  CpuRunner(const ModelConfig& config, const Weights& weights, CpuDevice& device, int max_tokens,
            bool f32_activations = false);

  int max_tokens() const override { return max_tokens_; }
  std::string describe() const override;
  bool on_gpu() const override { return false; }

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
  // Hybrid models: at most `n` blocks hold a linear state at once (0: no limit), counted as a
  // GPU's slots are (engine/forward/linear_slots.h), so that scheduling by slots runs here too.
  // REQUIRES: no block holds a linear state of this runner yet.
  void set_linear_slots(int n) { slots_ = n > 0 && c_.hybrid() ? std::make_unique<LinearSlots>(n) : nullptr; }
  LinearSlots* linear_slots() override { return slots_.get(); }

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
  // Runner: forward(); the CPU takes no draws (REQUIRES: draws empty).
  Status run(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, KvCache& kv,
             float* logits_out, std::span<const View> views,
             std::span<const std::optional<PlannedDraw>> draws, TokenId* drawn) override;

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
  void moe_feed_forward(const LayerWeights& L, int64_t n_tokens);  // engine/forward/cpu/cpu_runner_moe.cpp
  void moe_router(const LayerWeights& L, int64_t n_tokens);
  void moe_route(int64_t n_tokens);
  void moe_experts(const LayerWeights& L, int64_t n_tokens);
  // One Gated DeltaNet layer over the batch: h_ (normed input) -> h_ (the layer's output).
  void linear_layer(int layer, int64_t n_tokens, std::span<SequenceKv* const> seqs,
                    std::vector<LinearGroup>& groups);
  // Its phases (engine/forward/cpu/cpu_runner_linear.cpp, numbered there).
  void linear_projections(const LayerWeights& L, int64_t n_tokens);
  void linear_view_states(int layer, std::span<SequenceKv* const> seqs, std::vector<LinearGroup>& groups);
  void linear_factors(int layer, std::span<SequenceKv* const> seqs, std::vector<LinearGroup>& groups);
  void linear_recurrence(int layer, std::span<SequenceKv* const> seqs, std::vector<LinearGroup>& groups);
  void linear_output(const LayerWeights& L, int64_t n_tokens);
  template <class Fn>
  void per_token(int64_t n_tokens, const Fn& fn);
  // One attention layer over the batch: h_ (normed input) -> h_ (the layer's output).
  struct StepAttention;
  Status plan_step_attention(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                             std::span<const View> views, StepAttention& sa);
  void attention_layer(int layer, const LayerWeights& L, std::span<const BatchToken> batch,
                       std::span<SequenceKv* const> seqs, KvCache& kv, StepAttention& sa);
  void project_qkv(const LayerWeights& L, int64_t n_tokens);
  void rotate_and_store(int64_t t, const LayerWeights& L, const RopeParams& rope, int kv_slot,
                        const BatchToken& tok, const SequenceKv& s, KvCache& kv, const StepAttention& sa);

  const ModelConfig& c_;
  const Weights& w_;
  CpuDevice& dev_;
  int max_tokens_;
  bool f32_activations_;
  // Scratch, [max_tokens, width]:
  std::vector<float> x_, h_, q_, k_, v_, att_, gate_, up_;
  std::vector<float> rope_cs_;     // [n_rot] (cos, sin) pairs for the token being rotated
  RopeParams rope_;                // the model's rotation: base, scaling, Llama 3 factors, YaRN
  RopeParams rope_swa_;            // sliding-window layers' (gemma3): their base, no scaling
  std::vector<float> q_seg_;       // [view tokens, segments, q_dim] queries rotated per segment
  std::vector<BlockQ8> xq_;        // [max_tokens, widest / 32] activations of the integer kernels
  std::vector<GemmChunk> chunks_;  // reused by gemm()
  std::vector<float> scratch_;     // attention scores, [n_threads, longest sequence]
  LinearStats linear_stats_;
  bool chain_reads_ = true;
  std::unique_ptr<LinearSlots> slots_;  // set_linear_slots
  std::vector<float> qg_;
  // Mixture of experts: router probabilities [T][n_expert], each token's slots (expert, weight)
  // [T][n_expert_used], slot outputs [T][n_expert_used][n_embd], gathered rows [T][n_embd].
  std::vector<float> moe_logits_, moe_slot_weight_, moe_slot_out_, moe_rows_;
  std::vector<int> moe_slot_expert_;
  std::vector<int64_t> moe_first_,
      moe_slots_;  // slots bucketed by expert: [first[e], first[e+1])       // [max_tokens, 2 q_dim] query
                   // and gate (attention with an output gate)
  // Linear layers: [max_tokens, width] projections, factors and outputs.
  std::vector<float> l_qkv_, l_z_, l_beta_, l_alpha_, l_ba_, l_gb_, l_o_;
  std::vector<std::unique_ptr<GdnBlockOps>> gdn_ops_;        // one per thread
  std::vector<std::vector<float>> prefix_S_, prefix_tails_;  // composed prefixes of one step
  std::vector<GdnBlockOps::Fold> folds_;                     // one layer's appends, per sequence
};

}  // namespace chorus
