// Text generation on the CPU engine for one or more independent sequences, batched: every
// decode step runs one forward over one token per live sequence. Used by `chorus generate` and
// `chorus bench`; the request/step engine of the block store builds on the same runner.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/forward_pass.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"

namespace chorus {

class CpuDevice;
class CudaDevice;

struct GenerateOptions {
  int max_new_tokens = 256;      // bounded by the context too
  int n_ctx = 4096;              // positions per sequence
  int prefill_chunk = 256;       // tokens per prefill forward
  bool stop_at_end_of_generation = true;
  SamplingParams sampling;       // per sequence, seeds seed, seed+1, ...
  bool sample_on_device = true;  // on a GPU: decode tokens drawn there where the sampling allows
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // over all sequences
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int steps = 0;
};

// on_token(seq, token) is called as each token is produced (stream it with IncrementalDecoder).
using TokenCallback = std::function<void(int seq, TokenId token)>;

class Generator {
 public:
  // Builds the KV cache for n_seqs sequences of n_ctx positions. With `gpu`, the forward
  // passes run there (CudaRunner) and its errors come back too. Errors: out_of_memory.
  static Result<std::unique_ptr<Generator>> create(const Model& model, CpuDevice& device, int n_seqs,
                                                   const GenerateOptions& opts, CudaDevice* gpu = nullptr);
  ~Generator();

  // Prefills `prompt` into every sequence (each its own copy), then decodes until every
  // sequence stops. Errors: Errc::out_of_range when the prompt does not fit the context.
  Result<GenerateStats> run(const std::vector<TokenId>& prompt, const TokenCallback& on_token);

  // The tokens each sequence produced in the last run.
  const std::vector<std::vector<TokenId>>& outputs() const { return outputs_; }
  // Logits after the prompt (first generated position) of sequence 0 in the last run.
  const std::vector<float>& first_logits() const { return first_logits_; }

 private:
  Generator(const Model& m, int n_seqs, const GenerateOptions& o, std::unique_ptr<ForwardPass> pass);

  const Model& model_;
  GenerateOptions opts_;
  std::unique_ptr<ForwardPass> pass_;  // the runner (CPU or GPU) and its KV cache
  KvCache& kv_;                        // pass_'s
  std::vector<SequenceKv> seqs_;
  std::vector<std::vector<TokenId>> outputs_;
  std::vector<float> first_logits_;
};

}  // namespace chorus
