// The request/step engine (AsyncLLM's engine, plain C++: no actors, no threads of its own).
//
//   submit(forward | generate | probe)  ->  step()  ->  events
//
// Each step() runs ONE forward pass over tokens of many requests:
//   1. every active generate contributes its next token (decode),
//   2. probes come next (their question, chunked to the budget if long),
//   3. prefill chunks of forward requests and generate prefills share the remaining token
//      budget fairly (balanced batching, fair_shares: chunked prefill),
// so a long prefill never delays a decode or a probe by more than one step, nor a short
// prefill (a writer's, a source's line) by more than the steps its fair share takes.
// A block has at most one writer at a time: requests writing the same block run one after
// another in submission order (a later one waits; it is not an error).
// Same-step rule: a request sees the other blocks of its view as they were when the step
// started; a token another request writes in step t is visible to readers from step t + 1.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/forward_pass.h"
#include "engine/forward/sampler.h"
#include "engine/model/model.h"
#include "engine/sched/program_state.h"
#include "engine/step/block_store.h"
#include "engine/tokenizer/detokenizer.h"

namespace chorus {

class CpuDevice;
class CudaDevice;
class Trace;

using RequestId = int64_t;

struct StopCondition {
  std::vector<std::string> strings;  // stop once the generated text ends with one of these
  std::vector<TokenId> token_ids;    // stop after generating one of these
  int max_tokens = 256;
  bool at_end_of_generation = true;  // stop at the model's end-of-turn tokens
};

enum class RequestKind { forward, generate, probe, append };

struct Request {
  RequestKind kind = RequestKind::forward;
  std::vector<BlockId> view;                     // blocks attended, in order (the write block may be in it)
  BlockId write_to = -1;                         // forward/generate: the block written
  std::vector<TokenId> tokens;                   // forward: tokens appended; generate: prefill appended first
                                                 // (at least one unless the block has tokens to start from);
                                                 // probe: the question; append: tokens for the log only
  SamplingParams sampling;                       // generate
  StopCondition stop;                            // generate
  std::vector<std::vector<TokenId>> candidates;  // probe: answers; each a set of token ids

  static Request forward(BlockId write_to, std::vector<TokenId> tokens, std::vector<BlockId> view = {}) {
    Request r;
    r.write_to = write_to;
    r.tokens = std::move(tokens);
    r.view = std::move(view);
    return r;
  }
  static Request generate(BlockId write_to, std::vector<BlockId> view, std::vector<TokenId> prefill,
                          SamplingParams sampling, StopCondition stop) {
    Request r = forward(write_to, std::move(prefill), std::move(view));
    r.kind = RequestKind::generate;
    r.sampling = std::move(sampling);
    r.stop = std::move(stop);
    return r;
  }
  // Appends to a block's log without computing anything (bulk ingestion): the tokens take their
  // turn among the block's writers like any write, and their KV is computed by the next forward
  // or generate that writes the block, under that request's view. Until then readers do not
  // see them (views see what is cached).
  static Request append(BlockId write_to, std::vector<TokenId> tokens) {
    Request r = forward(write_to, std::move(tokens));
    r.kind = RequestKind::append;
    return r;
  }
  static Request probe(std::vector<BlockId> view, std::vector<TokenId> question,
                       std::vector<std::vector<TokenId>> candidates) {
    Request r = forward(-1, std::move(question), std::move(view));
    r.kind = RequestKind::probe;
    r.candidates = std::move(candidates);
    return r;
  }
};

// A block's log and its KV as bytes, to carry it to another engine of the same model (a
// migration by KV transfer, docs/cluster.md): Engine::export_block() makes it, load_block() puts
// it into a paused empty block of the other engine, whose restore then copies it into pages.
struct BlockImage {
  std::vector<TokenId> tokens;  // the log
  int64_t cached = 0;           // the positions the KV covers (a generated last token may have none yet)
  std::string format;           // the pages' format (KvCache::page_format()): both engines must agree
  std::vector<std::byte> kv;    // whole pages in position order (KvCache::save_pages)
};

enum class FinishReason {
  completed,
  max_tokens,
  stop_token,
  stop_string,
  end_of_generation,
  context_full,
  error
};
const char* finish_reason_name(FinishReason r);

struct Event {
  enum class Type { token, probe_result, finished } type = Type::token;
  RequestId request = 0;
  BlockId block = -1;
  TokenId token = -1;                // token: the token appended to `block`
  std::vector<float> probabilities;  // probe_result: one per candidate
  FinishReason reason = FinishReason::completed;
  std::string error;  // finished with reason error
  int64_t step = 0;
  // token, when its sampling asks for logprobs (SamplingParams::logprobs >= 0): the token's own
  // log-probability, then its most likely alternatives (token_logprobs).
  std::vector<TokenLogprob> logprobs;
};

struct EngineOptions {
  int64_t n_pages = 1024;          // KV pages of 16 positions
  int token_budget = 256;          // tokens per step
  int64_t max_view_tokens = 8192;  // longest view a request may attend
  // On a GPU: draw generates' tokens on the device where their sampling allows (only the token
  // comes back); off, every row of logits comes back and the host samples.
  bool sample_on_device = true;
  // Balanced batching: a step's prefill budget is shared fairly between the requests that
  // prefill (fair_shares); a chunk is shorter than this only when its request has less left.
  int min_prefill_chunk = 16;
  // Hybrid models: blocks that may hold a linear state at once (each one written or read; a
  // paused block holds none). On a GPU a slot is device memory (engine/forward/cuda/cuda_linear.h)
  // and 0 is the runner's default (64, or what half the device pool holds); on the CPU 0 is no
  // limit, and a limit counts as the GPU's does (tests, and sizing a GPU workload here).
  int linear_slots = 0;
  std::shared_ptr<Trace> trace = nullptr;  // set_trace() at creation (null: no trace)
};

// Balanced batching: `budget` tokens shared max-min fairly among requests wanting `wants[i]`
// tokens (oldest first): each gets what it wants or an equal share, the integer remainder going
// to the larger wants. When more ask than budget / min_chunk chunks hold, the oldest that many
// share it and the others wait a step. Returns each request's share (0: it waits).
std::vector<int64_t> fair_shares(const std::vector<int64_t>& wants, int64_t budget, int64_t min_chunk);

// What an engine has done so far, readable from any thread while it runs (the /metrics of
// `chorus node` and `chorus run --metrics-port`): a few relaxed atomic adds per step.
struct EngineCounters {
  std::atomic<int64_t> steps{0};  // steps that ran a forward pass
  std::atomic<int64_t> decode_tokens{0}, prefill_tokens{0}, probe_tokens{0};
  std::atomic<int64_t> requests{0};   // submitted
  std::atomic<int64_t> finished{0};   // ended, for any reason
  std::atomic<int64_t> busy_ns{0};    // in steps that ran a forward pass
  std::atomic<int64_t> in_flight{0};  // requests in the engine now
};

class Engine {
 public:
  // With `gpu`, the forward passes run on it (CudaRunner: the KV pages live in its pool, the
  // KvCache keeps their bookkeeping) and `device` is not used for them; errors then include
  // the CUDA runner's (a model whose layers it does not run yet, a pool too small).
  // REQUIRES: model, device and gpu outlive the engine.
  static Result<std::unique_ptr<Engine>> create(const Model& model, CpuDevice& device,
                                                EngineOptions opts = {}, CudaDevice* gpu = nullptr);
  ~Engine();

  BlockStore& blocks() { return *blocks_; }
  // The CPU runner (its statistics and switches), or null when the engine runs on a GPU.
  CpuRunner* cpu_runner() { return pass_->cpu_runner(); }
  std::string describe() const { return pass_->describe(); }  // where the forward passes run
  const Model& model() const { return model_; }
  // Hybrid models: the linear-state slots (null when nothing limits them: EngineOptions::linear_slots).
  const LinearSlots* linear_slots() const { return kv_.linear_slots(); }

  // Validates and queues a request. Errors (nothing is queued): a view or write block that does
  // not exist or was freed, a block named twice, a probe without candidates or question, a
  // generate with nothing to start from, a view longer than max_view_tokens.
  Result<RequestId> submit(Request r);

  // Runs one step; returns what happened in it. Errors only for internal failures.
  Result<std::vector<Event>> step();

  bool idle() const { return active_.empty(); }

  // Frees the KV pages of `blocks`, keeping every token (ThunderAgent's pause). Refused (nothing
  // changes) for a block that a pending request uses, that shares pages with another block
  // (merge/fork), or that is already paused. Paused blocks cannot be named by new requests.
  Status pause(std::span<const BlockId> blocks, PauseMode mode);
  // Rebuilds the KV of paused blocks, now (not through step()). Dropped blocks are rebuilt by
  // running each run of their tokens again, in the order it was first run, under the view (and
  // the view's block lengths) it was written under; so the blocks those views name must be
  // resident or restored in the same call. Errors name the block that stands in the way.
  Status restore(std::span<const BlockId> blocks);
  int64_t steps() const { return steps_; }

  // The block's log and KV (BlockImage), from its pages when resident or its host copy when
  // paused in offload mode. Refused (Errc::unsupported, the reason named) when the KV cannot
  // travel alone: it was dropped by a pause, the block shares pages (merge/fork) or was written
  // seeing other blocks (its KV depends on them), a hybrid model's linear state; and
  // (invalid_argument) while a request uses the block.
  Result<BlockImage> export_block(BlockId id) const;
  // Fills block `id` — paused, never written, unused — with `image`: its log, and its KV as an
  // offloaded copy; restore() copies it into pages (the tokens past `cached` are computed by
  // the block's next writer, as where it came from). A later drop pause recomputes the log as
  // one run seeing nothing else (as it was exported). Errors: another page format, a size that
  // is not whole pages of `cached` positions, a token outside the vocabulary, a block that is
  // not paused and empty.
  Status load_block(BlockId id, BlockImage image);
  // Its counters, shared: they may be read after the engine moved to its batcher's thread.
  std::shared_ptr<const EngineCounters> counters() const { return counters_; }

  // Records what the engine does into `trace` (engine/step/trace.h): each step with its batch,
  // each request's span, each block's appended tokens and text, pauses and restores. Null: none.
  void set_trace(std::shared_ptr<Trace> trace) { trace_ = std::move(trace); }

  // Ends now, between steps, every request that names one of `blocks` (writes or reads it), as
  // finished with FinishReason::error and the message `why`; returns their finished events (in
  // submission order). What they ran stays in the blocks; tokens not yet run (a prompt's rest, a
  // token sampled but not yet run) may be dropped from the log.
  std::vector<Event> cancel(std::span<const BlockId> blocks, const std::string& why);

 private:
  struct Active;
  struct Planned;
  struct StepBatch;
  Engine(const Model& m, EngineOptions o, std::unique_ptr<ForwardPass> pass);
  // The phases of step(), in order (engine.cpp).
  void start_writers(std::vector<Event>& events);
  std::vector<Planned> plan_step(std::vector<Event>& events);
  Status check_view(const Request& r) const;  // submit's checks
  Status check_fits_pool(const Request& r) const;
  Status check_kind(const Request& r) const;
  Status check_restore(std::span<const BlockId> ids) const;  // restore's steps (engine_pause.cpp)
  Result<std::vector<BlockId>> load_offloaded(std::span<const BlockId> ids);
  Status replay_dropped(const std::vector<BlockId>& dropped);
  void start_from_logits(Active& a, std::vector<Event>& events);
  void reserve(std::vector<Planned>& plan, std::vector<Event>& events);
  void reserve_slots(std::vector<Planned>& plan, std::vector<Event>& events);
  StepBatch build_batch(const std::vector<Planned>& plan);
  Status run(const std::vector<Planned>& plan, StepBatch& batch);
  void apply(const std::vector<Planned>& plan, std::vector<Event>& events);
  void answer_probe(Active& a, const float* logits, std::vector<Event>& events);
  // `logits`: those the token was drawn from (null when drawn on the device), for its logprobs.
  void take_token(Active& a, Block& block, TokenId token, const float* logits, std::vector<Event>& events);
  // One forward pass on the engine's runner into logits_; on a GPU, rows with a draw are
  // sampled there (their tokens to `drawn`).
  Status forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                 std::span<const View> views, std::span<const std::optional<PlannedDraw>> draws = {},
                 TokenId* drawn = nullptr);
  bool runnable(const Active& a) const;
  void forget_finished();
  void finish(Active& a, FinishReason why, std::vector<Event>& events, std::string error = {});

  const Model& model_;
  EngineOptions opts_;
  std::unique_ptr<ForwardPass> pass_;  // the runner (CPU or GPU) and its KV cache
  KvCache& kv_;                        // pass_'s
  std::unique_ptr<BlockStore> blocks_;
  std::unique_ptr<GrammarCache> grammars_;          // output constraints compiled, made at the first
  std::deque<std::unique_ptr<Active>> active_;      // submission order
  std::map<BlockId, std::deque<Active*>> writers_;  // unfinished writers of each block, FIFO
  RequestId next_id_ = 1;
  int64_t steps_ = 0;
  std::shared_ptr<EngineCounters> counters_ = std::make_shared<EngineCounters>();
  void count_step(const std::vector<Planned>& plan);  // into counters_
  std::shared_ptr<Trace> trace_;
  // The step's batch, the blocks' new tokens (from `before`, their lengths as the step began) and
  // the requests' spans, into trace_ (engine_trace.cpp).
  struct TraceMark {  // a planned request as the step began: its block's length, whether it decodes
    BlockId block;
    size_t length;
    bool decode;
  };
  std::vector<TraceMark> trace_marks(const std::vector<Planned>& plan) const;
  void trace_step(const std::vector<Planned>& plan, const std::vector<TraceMark>& before, int64_t t0);
  void trace_submit(const Active& a);
  void trace_finish(const Active& a, FinishReason why);
  void trace_blocks(const char* what, std::span<const BlockId> ids, const std::string& detail);
  std::vector<float> logits_;
  std::vector<std::optional<PlannedDraw>> draws_;  // a GPU step's device draws, per logits row (reused)
  std::vector<TokenId> drawn_;                     // their tokens

  // What each block's tokens were written under, for rebuilding dropped KV.
  struct WriteRun {
    int64_t seq;  // global order
    BlockId block;
    int64_t start, count;                           // block positions
    std::vector<std::pair<BlockId, int64_t>> view;  // blocks and the lengths they had then
    bool target_in_view;  // where the written block sat: at its place in the view, or last
    size_t target_index;  // its index in the view when it was in it
    int64_t step;         // the step that wrote its first tokens
  };
  std::vector<WriteRun> runs_;
  int64_t next_run_ = 0;
  void record_run(BlockId block, int64_t start, int64_t count, const std::vector<BlockId>& view);
  // Runs tokens of dropped blocks again: `pieces` are (run, first token, count) written
  // together in one forward, as they were in one step.
  Status replay(const std::vector<std::tuple<const WriteRun*, int64_t, int64_t>>& pieces);
};

}  // namespace chorus
