#include "engine/step/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/step/engine.h"

namespace chorus {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<std::unique_ptr<Generator>> Generator::create(const Model& m, CpuDevice& d, int n_seqs,
                                                     const GenerateOptions& o, CudaDevice* gpu) {
  if (n_seqs < 1) return make_error(Errc::invalid_argument, "need at least one sequence");
  if (o.n_ctx < 1) return make_error(Errc::invalid_argument, "context must hold at least one position");
  EngineOptions eo;
  eo.n_pages = static_cast<int64_t>(n_seqs) * KvCache::pages_for(o.n_ctx);
  eo.token_budget = std::max({o.prefill_chunk, n_seqs, 1});
  eo.max_view_tokens = o.n_ctx;
  eo.sample_on_device = o.sample_on_device;
  eo.trace = o.trace;
  auto engine = Engine::create(m, d, eo, gpu);
  if (!engine) return engine.error();
  return std::unique_ptr<Generator>(new Generator(m, n_seqs, o, std::move(*engine)));
}

Generator::Generator(const Model& m, int n_seqs, const GenerateOptions& o, std::unique_ptr<Engine> engine)
    : model_(m), opts_(o), n_seqs_(n_seqs), engine_(std::move(engine)) {}

Generator::~Generator() = default;

// Runs the engine's steps until it is idle; tokens go to outputs_ and on_token.
Status Generator::drain(const std::map<RequestId, int>& seq_of, const TokenCallback& on_token,
                        GenerateStats& st) {
  while (!engine_->idle()) {
    auto events = engine_->step();
    if (!events) return events.error();
    ++st.steps;
    for (const Event& e : *events) {
      if (e.type == Event::Type::finished && e.reason == FinishReason::error)
        return make_error(Errc::internal, e.error);
      if (e.type == Event::Type::finished &&
          e.reason == FinishReason::context_full)  // the pool is sized for all
        return make_error(Errc::out_of_memory, e.error);
      if (e.type != Event::Type::token) continue;
      const auto it = seq_of.find(e.request);
      if (it == seq_of.end()) continue;
      outputs_[static_cast<size_t>(it->second)].push_back(e.token);
      ++st.generated_tokens;
      if (on_token) on_token(it->second, e.token);
    }
  }
  return Status::success();
}

Result<GenerateStats> Generator::run(const std::vector<TokenId>& prompt, const TokenCallback& on_token) {
  GenerateStats st;
  if (prompt.empty()) return make_error(Errc::invalid_argument, "the prompt is empty");
  if (static_cast<int64_t>(prompt.size()) >= opts_.n_ctx)
    return make_error(Errc::out_of_range, "the prompt has " + std::to_string(prompt.size()) +
                                              " tokens but the context holds " + std::to_string(opts_.n_ctx) +
                                              " (raise --ctx, or shorten the prompt)");
  const int max_new = static_cast<int>(
      std::min<int64_t>(opts_.max_new_tokens, opts_.n_ctx - static_cast<int64_t>(prompt.size())));
  for (BlockId b : blocks_) CHORUS_TRY(engine_->blocks().free(b));
  blocks_.clear();
  outputs_.assign(static_cast<size_t>(n_seqs_), {});
  for (int s = 0; s < n_seqs_; ++s)
    blocks_.push_back(engine_->blocks().create("sequence " + std::to_string(s)));

  // Prefill: each sequence its own copy of the prompt (the engine batches their chunks).
  auto t0 = std::chrono::steady_clock::now();
  for (BlockId b : blocks_) CHORUS_TRY(engine_->submit(Request::forward(b, prompt, {b})));
  CHORUS_TRY(drain({}, nullptr, st));
  st.prompt_tokens = static_cast<int64_t>(prompt.size()) * n_seqs_;
  st.prefill_seconds = seconds_since(t0);
  first_logits_ = (*engine_->blocks().get(blocks_[0]))->last_logits;

  // Decode: a generate per sequence from its prompt's logits (seeds seed, seed + 1, ...).
  std::map<RequestId, int> seq_of;
  for (int s = 0; s < n_seqs_; ++s) {
    SamplingParams p = opts_.sampling;
    p.seed += static_cast<uint64_t>(s);
    StopCondition stop;
    stop.max_tokens = max_new;
    stop.at_end_of_generation = opts_.stop_at_end_of_generation;
    const BlockId b = blocks_[static_cast<size_t>(s)];
    CHORUS_ASSIGN_OR_RETURN(const RequestId id, engine_->submit(Request::generate(b, {b}, {}, p, stop)));
    seq_of[id] = s;
  }
  t0 = std::chrono::steady_clock::now();
  const int64_t steps_before = st.steps;
  CHORUS_TRY(drain(seq_of, on_token, st));
  st.decode_seconds = seconds_since(t0);
  st.steps -= steps_before;
  return st;
}

}  // namespace chorus
