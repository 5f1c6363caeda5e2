// The forward pass on a CUDA device (issue 9, first runner): dense attention models of the llama
// family (llama, and qwen2/qwen3-style models without q/k/v biases or output gates), with the
// CPU ModelRunner's interface and semantics — a batch of tokens written into blocks, each
// attending its view of blocks over a paged KV cache, queries rotated per block, nothing
// re-encoded. Page ids come from the same KvCache bookkeeping as on the CPU (KvCache::reserve,
// share_prefix); the keys and values live on the device, in pools indexed by those ids.
//
// Weights are uploaded once and converted to bf16 (matrix products: cuBLAS, f32 accumulation);
// norms, residuals and attention run in f32; KV pages are f32 or bf16. Every buffer comes from
// the device's pool at create(): forward() does not allocate on the device.
//
// Not yet: hybrid (Gated DeltaNet) and MoE layers, biases, output gates, sampling on
// the device in the step (logits come back to the host), tiled prefill attention, and the
// KvCache operations that copy page data (copy_on_write, offload): they copy the host pages
// only, so the engine does not hand this runner to a BlockStore yet.
//
// The runner's device buffers come from the device's bump pool and go back when it is
// destroyed: destroy runners in the reverse order of their creation.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "engine/model_runner.h"

namespace chorus {

class CudaDevice;

struct CudaRunnerOptions {
  int max_tokens = 256;   // tokens per forward
  int64_t n_pages = 0;    // KV pages (the KvCache that does the bookkeeping must have as many)
  bool kv_bf16 = false;   // bf16 KV pages (half the memory and bandwidth)
  // Steps of up to graph_max_tokens tokens (decode) replay CUDA graphs, one per power-of-two
  // size, padded with tokens that touch only a spare page; larger steps launch directly.
  bool graphs = true;
  int graph_max_tokens = 64;
};

class CudaRunner {
 public:
  // Errors: an architecture or layer kind the CUDA runner does not run yet (named), a weight
  // type it cannot convert, the device pool too small (what asked, what is left).
  static Result<std::unique_ptr<CudaRunner>> create(const ModelConfig& config, const Weights& weights, CudaDevice& dev,
                                                    const CudaRunnerOptions& opts);
  ~CudaRunner();

  // As ModelRunner::forward: `seqs` hold the page ids (reserved by the caller's KvCache) and
  // token counts; raises each written sequence's n_tokens. Logits of the tokens with `logits`
  // set go to `logits_out` ([n_logits, n_vocab], batch order).
  Status forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, float* logits_out,
                 std::span<const View> views = {});

  std::string describe() const;

 private:
  struct Impl;
  explicit CudaRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
