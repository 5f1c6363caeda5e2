// The forward pass on a CUDA device (issue 9): attention models of the llama family (llama, qwen2
// with its q/k/v biases, qwen3 with q/k norms) and hybrid qwen35 models, with the
// CPU CpuRunner's interface and semantics — a batch of tokens written into blocks, each
// attending its view of blocks over a paged KV cache, queries rotated per block, nothing
// re-encoded. Page ids come from the same KvCache bookkeeping as on the CPU (KvCache::reserve,
// share_prefix); the keys and values live on the device, in pools indexed by those ids.
//
// Weights are uploaded once and converted to bf16 (matrix products: cuBLAS, f32 accumulation);
// norms, residuals and attention run in f32; KV pages are f32 or bf16. Every buffer comes from
// the device's pool at create(): forward() does not allocate on the device.
//
// The runner is also the KvCache's page store (KvPageStore): copy-on-write and offload move
// page data inside the device pools and to host memory, so an Engine runs on it unchanged
// (Engine::create with a CudaDevice; `--device cuda|auto` on the command line).
//
// Sampling can run inside the step (forward()'s `draws`): only the token comes back, not the
// row of logits.
//
// Steps too large for a graph (prefill) attend in tiles (kernels/cuda/ops.h attention_tiled).
//
// q/k/v biases (qwen2) are added after the products, as on the CPU; attention output gates
// (qwen35's attention layers: attn_q yields a query and a gate per head) multiply the attention
// output by sigmoid(gate).
//
// Hybrid models (qwen35, qwen35moe, qwen3next): the Gated DeltaNet layers run on the device too,
// their per-block state in slots (engine/forward/cuda/cuda_linear.h); their decode steps are graphs as well.
// Mixture-of-experts layers (qwen35moe, qwen3next) route and run their experts on the device
// (engine/forward/cuda/cuda_moe.h), inside the same graphs.
//
// The runner's device buffers come from the device's bump pool and go back when it is
// destroyed: destroy runners in the reverse order of their creation.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "engine/forward/batch.h"
#include "engine/forward/kv_cache.h"
#include "engine/forward/linear_plan.h"
#include "engine/forward/runner.h"
#include "engine/forward/sampler.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace chorus {

class CudaDevice;

struct CudaRunnerOptions {
  int max_tokens = 256;  // tokens per forward
  int64_t n_pages = 0;   // KV pages (the KvCache that does the bookkeeping must have as many)
  bool kv_bf16 = false;  // bf16 KV pages (half the memory and bandwidth)
  // Steps of up to graph_max_tokens tokens (decode) replay CUDA graphs, one per power-of-two
  // size, padded with tokens that touch only a spare page; larger steps launch directly.
  bool graphs = true;
  int graph_max_tokens = 64;
  // Hybrid models: blocks whose Gated DeltaNet state the device holds at once (each block
  // written or read; engine/forward/cuda/cuda_linear.h gives a slot's size). 0: 64, or as many as half of
  // the device pool left after the runner's other buffers holds, if fewer (at least 1).
  int linear_slots = 0;
  // Hybrid models: a one-token writer whose view has a block written in the same step (a writer
  // reading a live thinker) reads its view through its query (O(dk^2) per block, part of a
  // decode step's graph) instead of composing the view's state every step (O(dk^3) per block,
  // launched before the graph); as the CPU's CpuRunner::set_chain_reads. Tests and benchmarks
  // turn it off to measure or check the other path.
  bool chain_reads = true;
};

class CudaRunner final : public KvPageStore, public Runner {
 public:
  // Whether the runner can run this model: an error (Errc::unsupported) naming the first
  // architecture feature, layer kind or weight type it does not handle yet. Needs no device.
  static Status check(const ModelConfig& config, const Weights& weights);
  // Errors: those of check(), and the device pool too small (what asked, what is left).
  static Result<std::unique_ptr<CudaRunner>> create(const ModelConfig& config, const Weights& weights,
                                                    CudaDevice& dev, const CudaRunnerOptions& opts);
  ~CudaRunner() override;

  int max_tokens() const override;
  bool on_gpu() const override { return true; }
  // Turns the replay of CUDA graphs on or off from the next step (CudaRunnerOptions::graphs);
  // on again also forgets why a failed capture had turned them off. graphs(): how many graphs
  // the runner holds (captured once per step key).
  void set_graphs(bool on);
  int graphs() const;
  // Hybrid models: CudaRunnerOptions::chain_reads from the next step on, and how many tokens'
  // linear layers have read their view through their query so far (in steps replayed from, or
  // captured into, a CUDA graph: `graphed`).
  void set_chain_reads(bool on);
  struct ChainReads {
    int64_t reads = 0, graphed = 0;
  };
  ChainReads chain_reads() const;

  // As CpuRunner::forward: `seqs` hold the page ids (reserved by the caller's KvCache) and
  // token counts; raises each written sequence's n_tokens. Logits of the tokens with `logits`
  // set go to `logits_out` ([n_logits, n_vocab], batch order).
  // `draws`, when given, has one entry per logits row: a row with a draw is sampled on the
  // device (kernels/cuda/ops.h sample_rows; Sampler::plan_draw makes the draws) and its token
  // goes to tokens_out[row] instead of its logits to logits_out (that row is left as it was).
  // Errors as CpuRunner's, and for draws that do not match the logits rows or ask for a
  // top_k the device sampler does not have (1..256).
  Status forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, float* logits_out,
                 std::span<const View> views = {}, std::span<const std::optional<PlannedDraw>> draws = {},
                 TokenId* tokens_out = nullptr);
  static constexpr int max_device_top_k() { return 256; }

  std::string describe() const override;
  // Runner: forward(), `kv` only keeping the pages' bookkeeping (they live in the device pool).
  Status run(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, KvCache& kv,
             float* logits_out, std::span<const View> views,
             std::span<const std::optional<PlannedDraw>> draws, TokenId* drawn) override {
    (void)kv;
    return forward(batch, seqs, logits_out, views, draws, drawn);
  }

  // Runner: the linear-state slots (hybrid models), and a paused block's state copied out of its
  // slot to host memory and back.
  LinearSlots* linear_slots() override;
  Status offload_linear(LinearState& s) override;
  Status load_linear(LinearState& s) override;

  // KvPageStore: the pages of every layer's K and V pools (f32 or bf16 as configured).
  size_t page_bytes() const override;
  Status copy_page(int32_t dst, int32_t src) override;
  Status save_pages(std::span<const int32_t> pages, std::byte* out) override;
  Status load_pages(std::span<const int32_t> pages, const std::byte* in) override;

 private:
  struct Impl;
  explicit CudaRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
