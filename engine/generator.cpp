#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/cuda_runner.h"
#include "gpu/cpu_device.h"

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
  const int64_t pages = static_cast<int64_t>(n_seqs) * KvCache::pages_for(o.n_ctx);
  auto pass = ForwardPass::create(m, d, std::max({o.prefill_chunk, n_seqs, 1}), pages, gpu);
  if (!pass) return pass.error();
  return std::unique_ptr<Generator>(new Generator(m, n_seqs, o, std::move(*pass)));
}

Generator::Generator(const Model& m, int n_seqs, const GenerateOptions& o, std::unique_ptr<ForwardPass> pass)
    : model_(m), opts_(o), pass_(std::move(pass)), kv_(pass_->kv()), seqs_(static_cast<size_t>(n_seqs)) {}

Generator::~Generator() = default;

Result<GenerateStats> Generator::run(const std::vector<TokenId>& prompt, const TokenCallback& on_token) {
  GenerateStats st;
  const int n = static_cast<int>(seqs_.size());
  if (prompt.empty()) return make_error(Errc::invalid_argument, "the prompt is empty");
  if (static_cast<int64_t>(prompt.size()) >= opts_.n_ctx)
    return make_error(Errc::out_of_range, "the prompt has " + std::to_string(prompt.size()) +
                                              " tokens but the context holds " + std::to_string(opts_.n_ctx) +
                                              " (raise --ctx, or shorten the prompt)");
  const int max_new = std::min<int64_t>(opts_.max_new_tokens, opts_.n_ctx - static_cast<int64_t>(prompt.size()));
  for (auto& s : seqs_) kv_.release(s);
  outputs_.assign(static_cast<size_t>(n), {});
  std::vector<SequenceKv*> ptrs;
  for (auto& s : seqs_) ptrs.push_back(&s);
  for (auto& s : seqs_)
    if (Status r = kv_.reserve(s, opts_.n_ctx); !r.ok()) return r.error();

  const int V = model_.config.n_vocab;
  std::vector<float> logits(static_cast<size_t>(n) * V);
  std::vector<Sampler> samplers;
  for (int i = 0; i < n; ++i) {
    SamplingParams p = opts_.sampling;
    p.seed += static_cast<uint64_t>(i);
    samplers.emplace_back(p);
  }
  std::vector<std::vector<TokenId>> history(static_cast<size_t>(n), prompt);

  // Prefill: each sequence its own copy of the prompt, in chunks.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<BatchToken> batch;
  for (int s = 0; s < n; ++s) {
    for (size_t start = 0; start < prompt.size(); start += static_cast<size_t>(pass_->max_tokens())) {
      const size_t end = std::min(prompt.size(), start + static_cast<size_t>(pass_->max_tokens()));
      batch.clear();
      for (size_t i = start; i < end; ++i)
        batch.push_back({prompt[i], static_cast<int32_t>(i), s, i + 1 == prompt.size()});
      if (Status r = pass_->run(batch, ptrs, logits.data() + static_cast<size_t>(s) * V); !r.ok())
        return r.error();
    }
  }
  st.prompt_tokens = static_cast<int64_t>(prompt.size()) * n;
  st.prefill_seconds = seconds_since(t0);
  first_logits_.assign(logits.begin(), logits.begin() + V);

  // Decode: one token per live sequence per step. On a GPU a sequence's next token is drawn
  // there when its sampler allows (Sampler::plan_draw: the same draw sample() would make), and
  // only the token comes back.
  t0 = std::chrono::steady_clock::now();
  std::vector<bool> live(static_cast<size_t>(n), true);
  std::vector<int> order;               // sequences in this step's batch, in batch order
  std::vector<float> step_logits(static_cast<size_t>(n) * V);
  std::vector<TokenId> ready(static_cast<size_t>(n), -1);  // drawn on the device, else -1
  std::vector<std::optional<PlannedDraw>> draws;
  std::vector<TokenId> drawn;
  for (int step = 0; step < max_new; ++step) {
    batch.clear();
    order.clear();
    // Sample from the previous forward's logits (row s of `logits` is sequence s).
    for (int s = 0; s < n; ++s) {
      if (!live[static_cast<size_t>(s)]) continue;
      const float* row = logits.data() + static_cast<size_t>(s) * V;
      TokenId tok = ready[static_cast<size_t>(s)];
      if (tok < 0)
        tok = samplers[static_cast<size_t>(s)].sample({row, static_cast<size_t>(V)}, history[static_cast<size_t>(s)]);
      ready[static_cast<size_t>(s)] = -1;
      history[static_cast<size_t>(s)].push_back(tok);
      outputs_[static_cast<size_t>(s)].push_back(tok);
      ++st.generated_tokens;
      if (on_token) on_token(s, tok);
      if (opts_.stop_at_end_of_generation && model_.tokenizer.is_end_of_generation(tok)) {
        live[static_cast<size_t>(s)] = false;
        continue;
      }
      if (step + 1 == max_new) continue;  // last token: no forward needed
      batch.push_back({tok, static_cast<int32_t>(history[static_cast<size_t>(s)].size() - 1), s, true});
      order.push_back(s);
    }
    if (batch.empty()) break;
    draws.clear();
    if (pass_->on_gpu() && opts_.sample_on_device) {
      bool any = false;
      for (int s : order) {
        draws.push_back(samplers[static_cast<size_t>(s)].plan_draw(CudaRunner::max_device_top_k()));
        any |= draws.back().has_value();
      }
      if (!any) draws.clear();
      drawn.assign(order.size(), -1);
    }
    if (Status r = pass_->run(batch, ptrs, step_logits.data(), {}, draws, drawn.data()); !r.ok()) return r.error();
    for (size_t i = 0; i < order.size(); ++i) {
      if (!draws.empty() && draws[i]) {
        ready[static_cast<size_t>(order[i])] = drawn[i];
        continue;
      }
      std::copy_n(step_logits.data() + i * V, V, logits.data() + static_cast<size_t>(order[i]) * V);
    }
    ++st.steps;
  }
  st.decode_seconds = seconds_since(t0);
  return st;
}

}  // namespace chorus
