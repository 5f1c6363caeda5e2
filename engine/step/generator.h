// Text generation for one or more independent sequences: a thin client of the request/step
// engine (engine/step/engine.h), so `chorus generate` and `chorus bench` run - and measure - the very
// step loop that `serve`, `node` and `run` use. Each sequence is a block of its own: its prompt
// is one forward (the engine batches the sequences' chunks), then a generate from the prompt's
// logits; every decode step is one forward over one token per live sequence. A stopped
// sequence's last token runs too (the engine keeps a block's KV covering its whole log).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/forward/sampler.h"
#include "engine/model/model.h"
#include "engine/step/block_store.h"

namespace chorus {

class Trace;

class CpuDevice;
class CudaDevice;
class Engine;
using RequestId = int64_t;

struct GenerateOptions {
  int max_new_tokens = 256;  // bounded by the context too
  int n_ctx = 4096;          // positions per sequence
  int prefill_chunk = 256;   // tokens per prefill forward
  bool stop_at_end_of_generation = true;
  SamplingParams sampling;       // per sequence, seeds seed, seed+1, ...
  bool sample_on_device = true;  // on a GPU: decode tokens drawn there where the sampling allows
  std::shared_ptr<Trace> trace;  // the engine records into it (EngineOptions::trace)
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // over all sequences
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int steps = 0;  // engine steps of the decode
};

// on_token(seq, token) is called as each token is produced (stream it with IncrementalDecoder).
using TokenCallback = std::function<void(int seq, TokenId token)>;

class Generator {
 public:
  // An engine whose KV pool holds n_seqs sequences of n_ctx positions. With `gpu`, the forward
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
  Engine& engine() { return *engine_; }

 private:
  Generator(const Model& m, int n_seqs, const GenerateOptions& o, std::unique_ptr<Engine> engine);
  Status drain(const std::map<RequestId, int>& seq_of, const TokenCallback& on_token, GenerateStats& st);

  const Model& model_;
  GenerateOptions opts_;
  int n_seqs_;
  std::unique_ptr<Engine> engine_;
  std::vector<BlockId> blocks_;  // one per sequence, from the last run
  std::vector<std::vector<TokenId>> outputs_;
  std::vector<float> first_logits_;
};

}  // namespace chorus
