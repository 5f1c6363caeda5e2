#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/cuda_runner.h"
#include "engine/linear_state.h"
#include "gpu/cpu_device.h"

namespace chorus {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::completed: return "completed";
    case FinishReason::max_tokens: return "max_tokens";
    case FinishReason::stop_token: return "stop_token";
    case FinishReason::stop_string: return "stop_string";
    case FinishReason::end_of_generation: return "end_of_generation";
    case FinishReason::context_full: return "context_full";
    case FinishReason::error: return "error";
  }
  return "?";
}

struct Engine::Active {
  RequestId id = 0;
  Request req;
  BlockId target = -1;           // the block written (the scratch block for a probe)
  size_t fed = 0;                // req.tokens already run
  bool decoding = false;         // generate: prefill done, sampling
  bool draining = false;         // generate: stopped, the last sampled token still to run
  FinishReason drain_reason = FinishReason::completed;
  TokenId pending = -1;          // generate: sampled, to run next step
  int generated = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<IncrementalDecoder> detok;
  std::string text;              // generated text, for stop strings
  bool done = false;
  bool started = false;          // forward/generate: took over the block's uncached log tokens
};

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, CpuDevice& device, EngineOptions opts,
                                               CudaDevice* gpu) {
  if (opts.token_budget < 1) return make_error(Errc::invalid_argument, "token budget must be at least 1");
  if (!gpu) {
    auto kv = KvCache::create(model.config, opts.n_pages);
    if (!kv) return kv.error();
    return std::unique_ptr<Engine>(new Engine(model, device, opts, std::move(*kv), nullptr));
  }
  CudaRunnerOptions ro;
  ro.max_tokens = opts.token_budget;
  ro.n_pages = opts.n_pages;
  auto runner = CudaRunner::create(model.config, model.weights, *gpu, ro);
  if (!runner) return runner.error();
  auto kv = KvCache::create(model.config, opts.n_pages, runner->get());
  if (!kv) return kv.error();
  return std::unique_ptr<Engine>(new Engine(model, device, opts, std::move(*kv), std::move(*runner)));
}

Engine::~Engine() = default;

Engine::Engine(const Model& m, CpuDevice& d, EngineOptions o, KvCache kv, std::unique_ptr<CudaRunner> gpu)
    : model_(m), device_(d), opts_(o), kv_(std::move(kv)), gpu_runner_(std::move(gpu)) {
  blocks_ = std::make_unique<BlockStore>(kv_, m.config.n_kv_layer);
  if (!gpu_runner_) runner_ = std::make_unique<ModelRunner>(m.config, m.weights, d, opts_.token_budget);
}

std::string Engine::describe() const { return gpu_runner_ ? gpu_runner_->describe() : device_.describe(); }

Status Engine::forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                       std::span<const View> views, std::span<const std::optional<PlannedDraw>> draws,
                       TokenId* drawn) {
  if (gpu_runner_) return gpu_runner_->forward(batch, seqs, logits_.data(), views, draws, drawn);
  return runner_->forward(batch, seqs, kv_, logits_.data(), views);
}

Result<RequestId> Engine::submit(Request r) {
  auto bad = [](const std::string& m) { return make_error(Errc::invalid_argument, m); };
  std::vector<BlockId> named = r.view;
  if (r.kind != RequestKind::probe) named.push_back(r.write_to);
  int64_t view_tokens = 0;
  for (BlockId id : named) {
    auto b = blocks_->get(id);
    if (b && (*b)->paused) return bad("block " + std::to_string(id) + " is paused: restore it first");
  }
  for (size_t i = 0; i < r.view.size(); ++i) {
    auto b = blocks_->get(r.view[i]);
    if (!b) return make_error(b.error().code, "view: " + b.error().message);
    view_tokens += static_cast<int64_t>((*b)->tokens.size());
    for (size_t j = 0; j < i; ++j)
      if (r.view[j] == r.view[i]) return bad("view names block " + std::to_string(r.view[i]) + " twice");
  }
  if (r.kind != RequestKind::probe) {
    auto w = blocks_->get(r.write_to);
    if (!w) return make_error(w.error().code, "write_to: " + w.error().message);
    if (std::count(r.view.begin(), r.view.end(), r.write_to) == 0) view_tokens += static_cast<int64_t>((*w)->tokens.size());
  }
  view_tokens += static_cast<int64_t>(r.tokens.size());
  if (r.kind == RequestKind::generate) view_tokens += r.stop.max_tokens;
  if (view_tokens > opts_.max_view_tokens)
    return make_error(Errc::out_of_range, "the view would hold " + std::to_string(view_tokens) +
                                              " tokens, more than the limit of " + std::to_string(opts_.max_view_tokens));
  for (TokenId t : r.tokens)
    if (t < 0 || t >= model_.config.n_vocab) return bad("token id " + std::to_string(t) + " is outside the vocabulary");
  auto a = std::make_unique<Active>();
  a->id = next_id_++;
  switch (r.kind) {
    case RequestKind::forward:
      if (r.tokens.empty()) return bad("forward with no tokens");
      a->target = r.write_to;
      break;
    case RequestKind::append:
      if (r.tokens.empty()) return bad("append with no tokens");
      if (!r.view.empty()) return bad("append takes no view: its tokens run under the view of the next writer");
      a->target = r.write_to;
      break;
    case RequestKind::generate: {
      Block* w = *blocks_->get(r.write_to);
      // Without prefill it starts from the block's last logits, or from those a forward or
      // generate still writing the block leaves when it ends (its last token runs with logits).
      const auto writing = writers_.find(r.write_to);
      const bool computing_writer =
          writing != writers_.end() && std::any_of(writing->second.begin(), writing->second.end(), [](const Active* x) {
            return x->req.kind == RequestKind::generate || x->req.kind == RequestKind::forward;
          });
      if (r.tokens.empty() && w->last_logits.empty() && !computing_writer)
        return bad("generate into block " + std::to_string(r.write_to) +
                   " has nothing to start from: give it prefill tokens");
      if (r.stop.max_tokens < 1) return bad("generate with max_tokens < 1");
      a->target = r.write_to;
      a->sampler = std::make_unique<Sampler>(r.sampling);
      a->detok = std::make_unique<IncrementalDecoder>(model_.tokenizer, DecodeOptions{.render_special = false});
      break;
    }
    case RequestKind::probe:
      if (r.tokens.empty()) return bad("probe with an empty question");
      if (r.candidates.empty()) return bad("probe with no candidates");
      for (const auto& c : r.candidates) {
        if (c.empty()) return bad("probe candidate with no tokens");
        for (TokenId t : c)
          if (t < 0 || t >= model_.config.n_vocab) return bad("probe candidate token " + std::to_string(t) + " is outside the vocabulary");
      }
      a->target = blocks_->create("probe scratch");
      break;
  }
  for (BlockId b : named) blocks_->hold(b);
  a->req = std::move(r);
  writers_[a->target].push_back(a.get());
  active_.push_back(std::move(a));
  return active_.back()->id;
}

bool Engine::runnable(const Active& a) const {
  const auto it = writers_.find(a.target);  // the oldest unfinished writer of the block runs
  return it == writers_.end() || it->second.empty() || it->second.front() == &a;
}

void Engine::finish(Active& a, FinishReason why, std::vector<Event>& events, std::string error) {
  a.done = true;
  if (auto it = writers_.find(a.target); it != writers_.end()) {
    auto& q = it->second;
    q.erase(std::find(q.begin(), q.end(), &a));
    if (q.empty()) {
      writers_.erase(it);
      // Hybrid models: no writer left, so the cached view state of the block goes (it is
      // rebuilt by the next writer); its summary stays.
      if (auto b = blocks_->get(a.target); b && !(*b)->extents.empty() && (*b)->extents.back().kv.linear)
        (*b)->extents.back().kv.linear->drop_view_cache();
    }
  }
  for (BlockId b : a.req.view) blocks_->unhold(b);
  if (a.req.kind != RequestKind::probe) blocks_->unhold(a.req.write_to);
  else (void)blocks_->free(a.target);
  Event e;
  e.type = Event::Type::finished;
  e.request = a.id;
  e.block = a.req.kind == RequestKind::probe ? -1 : a.target;
  e.reason = why;
  e.error = std::move(error);
  e.step = steps_;
  events.push_back(std::move(e));
}

Result<std::vector<Event>> Engine::step() {
  std::vector<Event> events;
  struct Forget {  // whatever happens in this step, finished requests leave the queue after it
    Engine* e;
    ~Forget() { e->forget_finished(); }
  } forget{this};
  struct Planned {
    Active* a;
    std::vector<TokenId> tokens;  // run this step
    bool logits;
  };
  std::vector<Planned> plan;
  int budget = opts_.token_budget;
  // 0. appends at the head of their block's writers go into the log now (no compute), and a
  //    forward or generate that starts writing a block takes over its uncached log tokens.
  for (bool more = true; more;) {
    more = false;
    for (auto& [block, queue] : writers_) {
      Active* a = queue.front();
      if (a->req.kind != RequestKind::append) continue;
      Block* w = *blocks_->get(block);
      w->tokens.insert(w->tokens.end(), a->req.tokens.begin(), a->req.tokens.end());
      finish(*a, FinishReason::completed, events);  // may erase the queue: restart the walk
      more = true;
      break;
    }
  }
  for (auto& [block, queue] : writers_) {
    Active* a = queue.front();
    if (a->started || (a->req.kind != RequestKind::forward && a->req.kind != RequestKind::generate)) continue;
    a->started = true;
    Block* w = *blocks_->get(block);
    const auto cached = static_cast<size_t>(w->n_cached());
    if (w->tokens.size() > cached && a->fed == 0 && !a->decoding) {
      a->req.tokens.insert(a->req.tokens.begin(), w->tokens.begin() + static_cast<long>(cached), w->tokens.end());
      w->tokens.resize(cached);  // they come back into the log as the request runs them
    }
  }
  // 1. decode: one token per generate that has one pending (drains included)
  for (auto& a : active_)
    if (!a->done && a->req.kind == RequestKind::generate && a->decoding && a->pending >= 0 && budget > 0 && runnable(*a)) {
      // The last token runs with logits too: they stay with the block, so that a generate with
      // no prefill can go on from where this one stopped.
      plan.push_back({a.get(), {a->pending}, true});
      --budget;
    }
  // 2. probes, 3. prefill chunks, oldest first
  for (RequestKind kind : {RequestKind::probe, RequestKind::forward}) {
    for (auto& a : active_) {
      if (budget == 0) break;
      if (a->done || !runnable(*a)) continue;
      const bool prefill = a->req.kind == RequestKind::forward || (a->req.kind == RequestKind::generate && !a->decoding);
      if (kind == RequestKind::probe ? a->req.kind != RequestKind::probe : !prefill) continue;
      const size_t left = a->req.tokens.size() - a->fed;
      if (left == 0) continue;
      const size_t k = std::min(left, static_cast<size_t>(budget));
      plan.push_back({a.get(), {a->req.tokens.begin() + static_cast<long>(a->fed), a->req.tokens.begin() + static_cast<long>(a->fed + k)},
                      k == left});
      budget -= static_cast<int>(k);
    }
  }
  // A generate with no prefill starts from the logits its block already has.
  for (auto& a : active_)
    if (!a->done && a->req.kind == RequestKind::generate && !a->decoding && a->req.tokens.empty() && runnable(*a)) {
      Block* w = *blocks_->get(a->target);
      if (w->last_logits.empty()) {  // the generate before it ended without logits (an error)
        finish(*a, FinishReason::error, events,
               "generate into block " + std::to_string(a->target) + " has nothing to start from: give it prefill tokens");
        continue;
      }
      a->decoding = true;
      logits_ = w->last_logits;
      const TokenId tok = a->sampler->sample(logits_, w->tokens);
      a->pending = tok;
      w->tokens.push_back(tok);
      ++a->generated;
      events.push_back({Event::Type::token, a->id, a->target, tok, {}, FinishReason::completed, {}, steps_});
    }
  if (plan.empty()) {
    ++steps_;
    return events;
  }

  // Room for this step's tokens in each written block.
  for (auto it = plan.begin(); it != plan.end();) {
    auto e = blocks_->prepare_write(it->a->target, static_cast<int64_t>(it->tokens.size()));
    if (!e) {
      finish(*it->a, FinishReason::context_full, events, e.error().message);
      it = plan.erase(it);
    } else {
      ++it;
    }
  }
  if (plan.empty()) {
    ++steps_;
    return events;
  }

  for (const Planned& p : plan) {
    const Block* w = *blocks_->get(p.a->target);
    record_run(p.a->target, w->n_cached(), static_cast<int64_t>(p.tokens.size()), p.a->req.view);
  }

  // Blocks -> runner sequences (one per extent) and views.
  std::vector<SequenceKv*> seqs;
  std::map<BlockId, std::vector<int32_t>> extent_seqs;
  auto seqs_of = [&](BlockId id) -> const std::vector<int32_t>& {
    auto it = extent_seqs.find(id);
    if (it != extent_seqs.end()) return it->second;
    auto& v = extent_seqs[id];
    for (Extent& e : (*blocks_->get(id))->extents) {
      v.push_back(static_cast<int32_t>(seqs.size()));
      seqs.push_back(&e.kv);
    }
    return v;
  };
  std::vector<View> views;
  std::vector<BatchToken> batch;
  for (const Planned& p : plan) {
    View v;
    bool has_target = false;
    for (BlockId b : p.a->req.view) {
      has_target |= b == p.a->target;
      for (int32_t s : seqs_of(b)) v.push_back(s);
    }
    if (!has_target)
      for (int32_t s : seqs_of(p.a->target)) v.push_back(s);
    const int32_t write_seq = seqs_of(p.a->target).back();
    const int64_t base = seqs[static_cast<size_t>(write_seq)]->n_tokens;
    views.push_back(std::move(v));
    for (size_t i = 0; i < p.tokens.size(); ++i)
      batch.push_back({p.tokens[i], static_cast<int32_t>(base + static_cast<int64_t>(i)), write_seq,
                       p.logits && i + 1 == p.tokens.size(), static_cast<int32_t>(views.size() - 1)});
  }
  int n_logits = 0;
  for (const BatchToken& b : batch) n_logits += b.logits ? 1 : 0;
  const size_t V = static_cast<size_t>(model_.config.n_vocab);
  logits_.resize(static_cast<size_t>(std::max(n_logits, 1)) * V);
  // On a GPU, a generate's next token is drawn on the device when its sampler allows (then only
  // the token comes back); its block keeps no logits until its last token runs.
  std::vector<std::optional<PlannedDraw>> draws;
  std::vector<TokenId> drawn;
  if (gpu_runner_ && opts_.sample_on_device) {
    bool any = false;
    for (const Planned& p : plan) {
      if (!p.logits) continue;
      std::optional<PlannedDraw> d;
      if (p.a->req.kind == RequestKind::generate && !p.a->draining)
        d = p.a->sampler->plan_draw(CudaRunner::max_device_top_k());
      any |= d.has_value();
      draws.push_back(d);
    }
    if (any) drawn.assign(draws.size(), -1);
    else draws.clear();
  }
  if (Status s = forward(batch, seqs, views, draws, drawn.data()); !s.ok()) return s.error();

  // Apply: logs, sampling, probe answers, completions.
  size_t row = 0;
  for (const Planned& p : plan) {
    Active& a = *p.a;
    Block* w = *blocks_->get(a.target);
    const bool on_device = p.logits && !draws.empty() && draws[row].has_value();
    const TokenId device_token = on_device ? drawn[row] : -1;
    const float* lg = p.logits && !on_device ? logits_.data() + row * V : nullptr;
    if (p.logits) ++row;
    if (!(a.req.kind == RequestKind::generate && a.decoding)) {  // prefill tokens enter the log now
      w->tokens.insert(w->tokens.end(), p.tokens.begin(), p.tokens.end());
      a.fed += p.tokens.size();
    }
    w->last_logits.clear();
    if (lg) w->last_logits.assign(lg, lg + V);
    switch (a.req.kind) {
      case RequestKind::append: break;  // never planned: applied before the batch is built
      case RequestKind::forward:
        if (a.fed == a.req.tokens.size()) finish(a, FinishReason::completed, events);
        break;
      case RequestKind::probe:
        if (lg) {
          double mx = -1e300, sum = 0;
          for (size_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(lg[i]));
          for (size_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(lg[i]) - mx);
          Event e{Event::Type::probe_result, a.id, -1, -1, {}, FinishReason::completed, {}, steps_};
          for (const auto& cand : a.req.candidates) {
            double pr = 0;
            for (TokenId t : cand) pr += std::exp(static_cast<double>(lg[t]) - mx) / sum;
            e.probabilities.push_back(static_cast<float>(pr));
          }
          events.push_back(std::move(e));
          finish(a, FinishReason::completed, events);
        }
        break;
      case RequestKind::generate: {
        if (a.draining) {
          a.pending = -1;
          finish(a, a.drain_reason, events);
          break;
        }
        if (!lg && !on_device) break;  // a prefill chunk that is not the last
        a.decoding = true;
        const TokenId tok = on_device ? device_token : a.sampler->sample({lg, V}, w->tokens);
        w->tokens.push_back(tok);
        a.pending = tok;
        ++a.generated;
        events.push_back({Event::Type::token, a.id, a.target, tok, {}, FinishReason::completed, {}, steps_});
        a.text += a.detok->push(tok);
        const StopCondition& st = a.req.stop;
        FinishReason why = FinishReason::completed;
        bool stop = false;
        if (std::find(st.token_ids.begin(), st.token_ids.end(), tok) != st.token_ids.end()) stop = true, why = FinishReason::stop_token;
        else if (st.at_end_of_generation && model_.tokenizer.is_end_of_generation(tok)) stop = true, why = FinishReason::end_of_generation;
        else if (a.generated >= st.max_tokens) stop = true, why = FinishReason::max_tokens;
        else
          for (const std::string& s : st.strings)
            if (!s.empty() && a.text.size() >= s.size() && a.text.compare(a.text.size() - s.size(), s.size(), s) == 0) {
              stop = true;
              why = FinishReason::stop_string;
              break;
            }
        if (stop) {  // run the last token too, so the block's KV covers its whole log
          a.draining = true;
          a.drain_reason = why;
        }
        break;
      }
    }
  }
  ++steps_;
  return events;
}

void Engine::record_run(BlockId block, int64_t start, int64_t count, const std::vector<BlockId>& view) {
  WriteRun run{next_run_++, block, start, count, {}, false, 0, steps_};
  for (size_t i = 0; i < view.size(); ++i) {
    if (view[i] == block) {
      run.target_in_view = true;
      run.target_index = i;
      continue;
    }
    run.view.emplace_back(view[i], (*blocks_->get(view[i]))->n_cached());
  }
  // Consecutive tokens of one block under an unchanged view extend the previous run, when
  // nothing was written in between: then no other run read the block at a length between the
  // two, and replaying the longer run in bigger pieces changes nothing anyone saw.
  if (!runs_.empty()) {
    WriteRun& last = runs_.back();
    if (last.block == block && last.start + last.count == start && last.view == run.view &&
        last.target_in_view == run.target_in_view && last.target_index == run.target_index) {
      last.count += count;
      return;
    }
  }
  runs_.push_back(std::move(run));
}

Status Engine::pause(std::span<const BlockId> ids, PauseMode mode) {
  for (BlockId id : ids) {  // check everything first: a refused pause changes nothing
    auto b = blocks_->get(id);
    if (!b) return b.error();
    const Block& blk = **b;
    if (blk.paused) return make_error(Errc::invalid_argument, "block " + std::to_string(id) + " is already paused");
    if (blk.holds > 0)
      return make_error(Errc::invalid_argument, "cannot pause block " + std::to_string(id) + ": " +
                                                    std::to_string(blk.holds) + " pending request(s) use it");
    if (blk.extents.size() > 1)
      return make_error(Errc::unsupported, "cannot pause block " + std::to_string(id) +
                                               ": it was built by merge/fork (pause its sources instead)");
    for (const Extent& e : blk.extents)
      for (int32_t pg : e.kv.pages)
        if (kv_.refs(pg) > 1)
          return make_error(Errc::unsupported, "cannot pause block " + std::to_string(id) +
                                                   ": it shares KV pages with another block (merge/fork)");
  }
  // Offload copies first, so that a failed copy leaves every block as it was.
  std::vector<std::vector<std::byte>> saved(ids.size());
  if (mode == PauseMode::offload)
    for (size_t i = 0; i < ids.size(); ++i) {
      const Block& b = **blocks_->get(ids[i]);
      if (b.extents.empty()) continue;
      const SequenceKv& kv = b.extents.back().kv;
      const std::span<const int32_t> pages(kv.pages.data(), static_cast<size_t>(KvCache::pages_for(kv.n_tokens)));
      saved[i].resize(pages.size() * kv_.page_bytes());
      if (Status s = kv_.save_pages(pages, saved[i].data()); !s.ok())
        return make_error(s.error().code, "pausing block " + std::to_string(ids[i]) + ": " + s.error().message);
    }
  for (size_t i = 0; i < ids.size(); ++i) {
    Block& b = **blocks_->get(ids[i]);
    b.paused = true;
    b.paused_cached = b.n_cached();
    b.last_logits.clear();
    if (b.extents.empty()) continue;
    SequenceKv& kv = b.extents.back().kv;
    if (mode == PauseMode::offload) {
      b.offloaded = std::move(saved[i]);
      b.offloaded_linear = kv.linear;  // hybrid models: the linear layers' state stays in host memory
    }
    kv_.release(kv);
  }
  return Status::success();
}

Status Engine::restore(std::span<const BlockId> ids) {
  for (BlockId id : ids) {
    auto b = blocks_->get(id);
    if (!b) return b.error();
    if (!(*b)->paused) return make_error(Errc::invalid_argument, "block " + std::to_string(id) + " is not paused");
  }
  // Dropped runs read their views' blocks: those must be resident or restored here too.
  auto restoring = [&](BlockId x) { return std::find(ids.begin(), ids.end(), x) != ids.end(); };
  for (const WriteRun& r : runs_) {
    if (!restoring(r.block) || !(*blocks_->get(r.block))->offloaded.empty()) continue;
    for (const auto& [vb, len] : r.view) {
      auto b = blocks_->get(vb);
      if (!b)
        return make_error(Errc::not_found, "cannot restore block " + std::to_string(r.block) +
                                               ": it was written seeing a block that is gone (" + b.error().message + ")");
      if ((*b)->paused && !restoring(vb))
        return make_error(Errc::invalid_argument, "cannot restore block " + std::to_string(r.block) +
                                                      ": it was written seeing block " + std::to_string(vb) +
                                                      ", which is paused; restore both together");
    }
  }
  // Room for all of them first: a restore that ran out of pages halfway would leave blocks
  // neither paused nor whole.
  int64_t need = 0;
  for (BlockId id : ids) need += KvCache::pages_for((*blocks_->get(id))->paused_cached);
  if (need > kv_.n_free())
    return make_error(Errc::out_of_memory, "KV cache full: restoring needs " + std::to_string(need) + " pages, " +
                                               std::to_string(kv_.n_free()) + " of " + std::to_string(kv_.n_pages()) +
                                               " are free; nothing was restored");
  // Offloaded blocks: copy back.
  std::vector<BlockId> dropped;
  for (BlockId id : ids) {
    Block& b = **blocks_->get(id);
    if (b.offloaded.empty()) {
      dropped.push_back(id);
      if (!b.extents.empty()) b.extents.back().kv.n_tokens = 0;
      continue;
    }
    SequenceKv& kv = b.extents.back().kv;
    const int64_t n = b.paused_cached;
    if (Status s = kv_.reserve(kv, n); !s.ok()) return s;
    const std::span<const int32_t> pages(kv.pages.data(), static_cast<size_t>(KvCache::pages_for(n)));
    if (pages.size() * kv_.page_bytes() != b.offloaded.size())
      return make_error(Errc::internal, "block " + std::to_string(id) + ": its offloaded copy holds " +
                                            std::to_string(b.offloaded.size()) + " bytes, not " +
                                            std::to_string(pages.size()) + " pages");
    if (Status s = kv_.load_pages(pages, b.offloaded.data()); !s.ok())
      return make_error(s.error().code, "restoring block " + std::to_string(id) + ": " + s.error().message);
    kv.n_tokens = n;
    kv.linear = std::move(b.offloaded_linear);
    b.offloaded.clear();
    b.offloaded.shrink_to_fit();
    b.paused = false;
  }
  // Dropped blocks: run their runs again, in their first order, under their recorded views;
  // runs of one step together in one forward (readers of a block written in the same step saw
  // it as the step found it: the same-step rule reproduces that, and a hybrid model's linear
  // layers cannot read a block at an earlier length than it has).
  for (BlockId id : ids) (*blocks_->get(id))->paused = false;
  std::vector<const WriteRun*> todo;
  for (const WriteRun& r : runs_) {
    if (std::find(dropped.begin(), dropped.end(), r.block) == dropped.end()) continue;  // offloaded: back
    if (r.start >= (*blocks_->get(r.block))->paused_cached) continue;  // written after the pause
    todo.push_back(&r);
  }
  for (size_t i = 0; i < todo.size();) {
    size_t j = i + 1;
    while (j < todo.size() && todo[j]->step == todo[i]->step) ++j;
    auto count_of = [&](const WriteRun* r) {
      return std::min(r->count, (*blocks_->get(r->block))->paused_cached - r->start);
    };
    if (j == i + 1) {  // one run: in pieces of the token budget
      const int64_t count = count_of(todo[i]);
      for (int64_t done = 0; done < count;) {
        const int64_t k = std::min<int64_t>(count - done, opts_.token_budget);
        if (Status s = replay({{todo[i], done, k}}); !s.ok()) return s;
        done += k;
      }
    } else {
      std::vector<std::tuple<const WriteRun*, int64_t, int64_t>> pieces;
      for (size_t k = i; k < j; ++k) pieces.emplace_back(todo[k], 0, count_of(todo[k]));
      if (Status s = replay(pieces); !s.ok()) return s;
    }
    i = j;
  }
  return Status::success();
}

Status Engine::replay(const std::vector<std::tuple<const WriteRun*, int64_t, int64_t>>& pieces) {
  std::deque<SequenceKv> cut;  // context blocks cut to the lengths they had (stable addresses)
  std::vector<SequenceKv*> seqs;
  std::vector<View> views;
  std::vector<BatchToken> batch;
  std::vector<std::pair<Block*, size_t>> last_logits;  // blocks whose last token is in this forward
  for (const auto& [r, done, k] : pieces) {
    Block& w = **blocks_->get(r->block);
    auto e = blocks_->prepare_write(r->block, k);
    if (!e) return e.error();
    View v;
    auto add_block = [&](BlockId b, int64_t len) {
      for (Extent& x : (*blocks_->get(b))->extents) {
        if (x.first >= len) break;
        SequenceKv c = x.kv;
        c.n_tokens = std::min(x.kv.n_tokens, len - x.first);
        // The linear-layer state is read, not owned: an alias that does not count as a holder
        // (a holder would make the block's own writer copy it).
        c.linear = std::shared_ptr<LinearState>(std::shared_ptr<LinearState>(), x.kv.linear.get());
        cut.push_back(std::move(c));
        v.push_back(static_cast<int32_t>(seqs.size()));
        seqs.push_back(&cut.back());
      }
    };
    for (size_t i = 0; i <= r->view.size(); ++i) {
      if (r->target_in_view && i == r->target_index) v.push_back(-2);  // placeholder for the write block
      if (i < r->view.size()) add_block(r->view[i].first, r->view[i].second);
    }
    const auto write_seq = static_cast<int32_t>(seqs.size());
    seqs.push_back(&e.value()->kv);
    if (r->target_in_view) std::replace(v.begin(), v.end(), -2, write_seq);
    else v.push_back(write_seq);
    const int64_t base = e.value()->kv.n_tokens;
    const bool last = r->start + done + k == w.paused_cached;
    for (int64_t i = 0; i < k; ++i)
      batch.push_back({w.tokens[static_cast<size_t>(r->start + done + i)], static_cast<int32_t>(base + i), write_seq,
                       last && i + 1 == k, static_cast<int32_t>(views.size())});
    if (last) last_logits.emplace_back(&w, last_logits.size());
    views.push_back(std::move(v));
  }
  logits_.resize(static_cast<size_t>(model_.config.n_vocab) * std::max<size_t>(1, last_logits.size()));
  if (Status s = forward(batch, seqs, views); !s.ok()) return s;
  const auto V = static_cast<size_t>(model_.config.n_vocab);
  for (const auto& [b, i] : last_logits)
    b->last_logits.assign(logits_.begin() + static_cast<long>(i * V), logits_.begin() + static_cast<long>((i + 1) * V));
  return Status::success();
}

void Engine::forget_finished() {
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& a) { return a->done; }), active_.end());
}

}  // namespace chorus
