#include "engine/step/engine.h"

#include "engine/step/engine_internal.h"
#include "engine/step/trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "engine/forward/cuda/cuda_runner.h"
#include "engine/forward/linear_state.h"

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

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, CpuDevice& device, EngineOptions opts,
                                               CudaDevice* gpu) {
  if (opts.token_budget < 1) return make_error(Errc::invalid_argument, "token budget must be at least 1");
  auto pass = ForwardPass::create(model, device, opts.token_budget, opts.n_pages, gpu, opts.linear_slots);
  if (!pass) return pass.error();
  auto engine = std::unique_ptr<Engine>(new Engine(model, opts, std::move(*pass)));
  engine->set_trace(opts.trace);
  return engine;
}

Engine::~Engine() = default;

Engine::Engine(const Model& m, EngineOptions o, std::unique_ptr<ForwardPass> pass)
    : model_(m), opts_(o), pass_(std::move(pass)), kv_(pass_->kv()) {
  blocks_ = std::make_unique<BlockStore>(kv_, m.config.n_kv_layer);
}

Status Engine::forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                       std::span<const View> views, std::span<const std::optional<PlannedDraw>> draws,
                       TokenId* drawn) {
  return pass_->run(batch, seqs, logits_.data(), views, draws, drawn);
}

namespace {

const char* const kNoTokenMessage = "the output grammar allows no token of this model's vocabulary here";

Error bad(const std::string& m) {
  return make_error(Errc::invalid_argument, m);
}

std::vector<BlockId> named_blocks(const Request& r) {  // its view and the block it writes
  std::vector<BlockId> named = r.view;
  if (r.kind != RequestKind::probe) named.push_back(r.write_to);
  return named;
}

}  // namespace

// The blocks it names exist, none is paused, none twice in the view; the view stays within
// max_view_tokens with all it may add.
Status Engine::check_view(const Request& r) const {
  for (BlockId id : named_blocks(r)) {
    auto b = blocks_->get(id);
    if (b && (*b)->paused) return bad("block " + std::to_string(id) + " is paused: restore it first");
  }
  int64_t view_tokens = 0;
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
    if (std::count(r.view.begin(), r.view.end(), r.write_to) == 0)
      view_tokens += static_cast<int64_t>((*w)->tokens.size());
  }
  view_tokens += static_cast<int64_t>(r.tokens.size());
  if (r.kind == RequestKind::generate) view_tokens += r.stop.max_tokens;
  if (view_tokens > opts_.max_view_tokens)
    return make_error(Errc::out_of_range, "the view would hold " + std::to_string(view_tokens) +
                                              " tokens, more than the limit of " +
                                              std::to_string(opts_.max_view_tokens));
  for (TokenId t : r.tokens)
    if (t < 0 || t >= model_.config.n_vocab)
      return bad("token id " + std::to_string(t) + " is outside the vocabulary");
  return Status::success();
}

// A request that may write more than the whole pool could never finish: refuse it now rather
// than run it until the pool is full (Errc::out_of_memory travels to node and HTTP clients).
Status Engine::check_fits_pool(const Request& r) const {
  if (r.kind == RequestKind::append) return Status::success();
  int64_t have = 0, add = static_cast<int64_t>(r.tokens.size());
  if (r.kind == RequestKind::probe) {
    size_t longest = 0;
    for (const auto& c : r.candidates) longest = std::max(longest, c.size());
    add += static_cast<int64_t>(longest);
  } else {
    have = static_cast<int64_t>((*blocks_->get(r.write_to))->tokens.size());
    if (r.kind == RequestKind::generate) add += r.stop.max_tokens;
  }
  const int64_t pages = KvCache::pages_for(have + add) - KvCache::pages_for(have);
  if (pages > kv_.n_pages())
    return make_error(Errc::out_of_memory, "the request may write " + std::to_string(add) + " tokens (" +
                                               std::to_string(pages) + " KV pages); the pool has " +
                                               std::to_string(kv_.n_pages()) + " pages");
  return Status::success();
}

// What each kind needs: tokens; a generate something to start from; a probe candidates.
Status Engine::check_kind(const Request& r) const {
  switch (r.kind) {
    case RequestKind::forward:
      if (r.tokens.empty()) return bad("forward with no tokens");
      break;
    case RequestKind::append:
      if (r.tokens.empty()) return bad("append with no tokens");
      if (!r.view.empty())
        return bad("append takes no view: its tokens run under the view of the next writer");
      break;
    case RequestKind::generate: {
      const Block* w = *blocks_->get(r.write_to);
      // Without prefill it starts from the block's last logits, or from those a forward or
      // generate still writing the block leaves when it ends (its last token runs with logits).
      const auto writing = writers_.find(r.write_to);
      const bool computing_writer =
          writing != writers_.end() &&
          std::any_of(writing->second.begin(), writing->second.end(), [](const Active* x) {
            return x->req.kind == RequestKind::generate || x->req.kind == RequestKind::forward;
          });
      if (r.tokens.empty() && w->last_logits.empty() && !computing_writer)
        return bad("generate into block " + std::to_string(r.write_to) +
                   " has nothing to start from: give it prefill tokens");
      if (r.stop.max_tokens < 1) return bad("generate with max_tokens < 1");
      if (r.sampling.logprobs > kMaxLogprobs)
        return bad("generate with logprobs " + std::to_string(r.sampling.logprobs) + " (at most " +
                   std::to_string(kMaxLogprobs) + ")");
      break;
    }
    case RequestKind::probe:
      if (r.tokens.empty()) return bad("probe with an empty question");
      if (r.candidates.empty()) return bad("probe with no candidates");
      for (const auto& c : r.candidates) {
        if (c.empty()) return bad("probe candidate with no tokens");
        for (TokenId t : c)
          if (t < 0 || t >= model_.config.n_vocab)
            return bad("probe candidate token " + std::to_string(t) + " is outside the vocabulary");
      }
      break;
  }
  return Status::success();
}

Result<RequestId> Engine::submit(Request r) {
  CHORUS_TRY(check_view(r));
  CHORUS_TRY(check_fits_pool(r));
  CHORUS_TRY(check_kind(r));
  if (r.kind == RequestKind::generate && !r.sampling.constraint.empty() && !r.sampling.grammar) {
    if (!grammars_) grammars_ = std::make_unique<GrammarCache>(TokenVocab::create(model_.tokenizer));
    CHORUS_ASSIGN_OR_RETURN(auto g, grammars_->get(r.sampling.constraint));
    r.sampling.grammar = std::move(g);
  }
  auto a = std::make_unique<Active>();
  a->id = next_id_++;
  a->target = r.kind == RequestKind::probe ? blocks_->create("probe scratch") : r.write_to;
  if (r.kind == RequestKind::generate) {
    a->sampler = std::make_unique<Sampler>(r.sampling);
    a->detok = std::make_unique<IncrementalDecoder>(model_.tokenizer, DecodeOptions{.render_special = false});
  }
  for (BlockId b : named_blocks(r)) blocks_->hold(b);
  a->req = std::move(r);
  writers_[a->target].push_back(a.get());
  if (trace_) trace_submit(*a);
  active_.push_back(std::move(a));
  counters_->requests.fetch_add(1, std::memory_order_relaxed);
  return active_.back()->id;
}

bool Engine::runnable(const Active& a) const {
  const auto it = writers_.find(a.target);  // the oldest unfinished writer of the block runs
  return it == writers_.end() || it->second.empty() || it->second.front() == &a;
}

void Engine::finish(Active& a, FinishReason why, std::vector<Event>& events, std::string error) {
  a.done = true;
  if (trace_) trace_finish(a, why);
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
  if (a.req.kind != RequestKind::probe)
    blocks_->unhold(a.req.write_to);
  else
    (void)blocks_->free(a.target);
  Event e;
  e.type = Event::Type::finished;
  e.request = a.id;
  e.block = a.req.kind == RequestKind::probe ? -1 : a.target;
  e.reason = why;
  e.error = std::move(error);
  e.step = steps_;
  events.push_back(std::move(e));
  counters_->finished.fetch_add(1, std::memory_order_relaxed);
}

// A request's share of one step: the tokens it runs, and whether its last one returns logits.

// What one forward pass runs: the written blocks' runner sequences (one per extent), each
// planned request's view of them, the tokens, and on a GPU the rows drawn there.
struct Engine::StepBatch {
  std::vector<SequenceKv*> seqs;
  std::vector<View> views;
  std::vector<BatchToken> tokens;
  size_t n_logits = 0;
};

// The step loop: plan -> reserve -> build the batch -> run -> apply.
Result<std::vector<Event>> Engine::step() {
  std::vector<Event> events;
  struct Forget {  // whatever happens in this step, finished requests leave the queue after it
    Engine* e;
    ~Forget() { e->forget_finished(); }
  } forget{this};
  const int64_t t0 = trace_ ? trace_->now_us() : 0;
  start_writers(events);
  std::vector<Planned> plan = plan_step(events);
  reserve(plan, events);
  if (!plan.empty()) {
    const auto began = std::chrono::steady_clock::now();
    StepBatch batch = build_batch(plan);
    const int64_t m0 = trace_ ? trace_->clock_ns() : 0;
    const auto before = trace_ ? trace_marks(plan) : std::vector<TraceMark>{};
    const int64_t m1 = trace_ ? trace_->clock_ns() : 0;
    count_step(plan);  // the kinds of its tokens, before apply() moves requests on
    CHORUS_TRY(run(plan, batch));
    apply(plan, events);
    counters_->busy_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began)
            .count(),
        std::memory_order_relaxed);
    if (trace_) {
      const int64_t m2 = trace_->clock_ns();
      trace_step(plan, before, t0);
      trace_->charge(m1 - m0 + trace_->clock_ns() - m2);  // what recording the step cost it
    }
  }
  ++steps_;
  return events;
}

// Appends at the head of their block's writers go into the log now (no compute), and a forward
// or generate that starts writing a block takes over its uncached log tokens.
void Engine::start_writers(std::vector<Event>& events) {
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
      a->req.tokens.insert(a->req.tokens.begin(), w->tokens.begin() + static_cast<long>(cached),
                           w->tokens.end());
      w->tokens.resize(cached);  // they come back into the log as the request runs them
    }
  }
}

// Balanced batching (AsyncLLM §3.3: a fair-queueing variant, so that a short prefill is not held
// behind a long one). Water-filling: the smaller wants are served whole while they are below an
// equal share of what is left.
std::vector<int64_t> fair_shares(const std::vector<int64_t>& wants, int64_t budget, int64_t min_chunk) {
  std::vector<int64_t> shares(wants.size(), 0);
  const size_t served = std::min(wants.size(), static_cast<size_t>(std::max<int64_t>(1, budget / min_chunk)));
  std::vector<size_t> order(served);
  for (size_t i = 0; i < served; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return wants[a] < wants[b]; });
  int64_t left = budget;
  for (size_t j = 0; j < served && left > 0; ++j) {
    const int64_t share = left / static_cast<int64_t>(served - j);
    const int64_t g = std::min(wants[order[j]], std::max<int64_t>(share, 1));
    shares[order[j]] = g;
    left -= g;
  }
  return shares;
}

// Who runs what in this step, within the token budget: 1. one decode token per generate that
// has one pending (drains included), 2. probes, oldest first, 3. prefill chunks, shared fairly
// (fair_shares). A generate with no prefill starts now from the logits its block has (its first
// token needs no forward).
std::vector<Engine::Planned> Engine::plan_step(std::vector<Event>& events) {
  std::vector<Planned> plan;
  int budget = opts_.token_budget;
  for (auto& a : active_)
    if (!a->done && a->req.kind == RequestKind::generate && a->decoding && a->pending >= 0 && budget > 0 &&
        runnable(*a)) {
      // The last token runs with logits too: they stay with the block, so that a generate with
      // no prefill can go on from where this one stopped.
      plan.push_back({a.get(), {a->pending}, true});
      --budget;
    }
  auto chunk = [&plan](Active* a, size_t k) {
    const size_t left = a->req.tokens.size() - a->fed;
    const auto from = a->req.tokens.begin() + static_cast<long>(a->fed);
    plan.push_back({a, {from, from + static_cast<long>(k)}, k == left});
  };
  std::vector<Active*> prefills;
  std::vector<int64_t> wants;
  for (auto& a : active_) {
    if (a->done || !runnable(*a)) continue;
    const size_t left = a->req.tokens.size() - a->fed;
    if (left == 0) continue;
    if (a->req.kind == RequestKind::probe) {
      if (budget == 0) continue;
      const size_t k = std::min(left, static_cast<size_t>(budget));
      chunk(a.get(), k);
      budget -= static_cast<int>(k);
    } else if (a->req.kind == RequestKind::forward ||
               (a->req.kind == RequestKind::generate && !a->decoding)) {
      prefills.push_back(a.get());
      wants.push_back(static_cast<int64_t>(left));
    }
  }
  const std::vector<int64_t> shares = fair_shares(wants, budget, std::max(1, opts_.min_prefill_chunk));
  for (size_t i = 0; i < prefills.size(); ++i)
    if (shares[i] > 0) chunk(prefills[i], static_cast<size_t>(shares[i]));
  for (auto& a : active_)
    if (!a->done && a->req.kind == RequestKind::generate && !a->decoding && a->req.tokens.empty() &&
        runnable(*a))
      start_from_logits(*a, events);
  return plan;
}

void Engine::start_from_logits(Active& a, std::vector<Event>& events) {
  Block* w = *blocks_->get(a.target);
  if (w->last_logits.empty()) {  // the generate before it ended without logits (an error)
    finish(a, FinishReason::error, events,
           "generate into block " + std::to_string(a.target) +
               " has nothing to start from: give it prefill tokens");
    return;
  }
  logits_ = w->last_logits;
  take_token(a, *w, a.sampler->sample(logits_, w->tokens), logits_.data(), events);
}

// Room for this step's tokens in each written block; a request whose block cannot grow ends
// (context_full). Then each run is recorded, for rebuilding dropped KV.
void Engine::reserve(std::vector<Planned>& plan, std::vector<Event>& events) {
  for (auto it = plan.begin(); it != plan.end();) {
    auto e = blocks_->prepare_write(it->a->target, static_cast<int64_t>(it->tokens.size()));
    if (!e) {
      finish(*it->a, FinishReason::context_full, events, e.error().message);
      it = plan.erase(it);
    } else {
      ++it;
    }
  }
  reserve_slots(plan, events);
  for (const Planned& p : plan) {
    const Block* w = *blocks_->get(p.a->target);
    record_run(p.a->target, w->n_cached(), static_cast<int64_t>(p.tokens.size()), p.a->req.view);
  }
}

// Hybrid models with counted slots: a request whose block has no linear state of its own yet
// (a new block, a state shared whole, one whose slot went at a pause) takes a slot in this step;
// those for whom none is left end (Errc::out_of_memory's message), in plan order. A program
// scheduler keeps this from happening to its programs (the room gate counts slots).
void Engine::reserve_slots(std::vector<Planned>& plan, std::vector<Event>& events) {
  const LinearSlots* slots = kv_.linear_slots();
  if (!slots) return;
  int left = slots->free();
  for (auto it = plan.begin(); it != plan.end();) {
    const SequenceKv& kv = (*blocks_->get(it->a->target))->extents.back().kv;
    const bool needs = !kv.linear || kv.linear.use_count() > 1 || !slots->holds(*kv.linear);
    if (needs && left == 0) {
      finish(*it->a, FinishReason::error, events, slots->exhausted_message());
      it = plan.erase(it);
      continue;
    }
    left -= needs ? 1 : 0;
    ++it;
  }
}

// Blocks -> runner sequences (one per extent) and views; the tokens at their block positions.
Engine::StepBatch Engine::build_batch(const std::vector<Planned>& plan) {
  StepBatch b;
  std::map<BlockId, std::vector<int32_t>> extent_seqs;
  auto seqs_of = [&](BlockId id) -> const std::vector<int32_t>& {
    auto it = extent_seqs.find(id);
    if (it != extent_seqs.end()) return it->second;
    auto& v = extent_seqs[id];
    for (Extent& e : (*blocks_->get(id))->extents) {
      v.push_back(static_cast<int32_t>(b.seqs.size()));
      b.seqs.push_back(&e.kv);
    }
    return v;
  };
  for (const Planned& p : plan) {
    View v;
    bool has_target = false;
    for (BlockId blk : p.a->req.view) {
      has_target |= blk == p.a->target;
      for (int32_t s : seqs_of(blk)) v.push_back(s);
    }
    if (!has_target)
      for (int32_t s : seqs_of(p.a->target)) v.push_back(s);
    const int32_t write_seq = seqs_of(p.a->target).back();
    const int64_t base = b.seqs[static_cast<size_t>(write_seq)]->n_tokens;
    b.views.push_back(std::move(v));
    for (size_t i = 0; i < p.tokens.size(); ++i)
      b.tokens.push_back({p.tokens[i], static_cast<int32_t>(base + static_cast<int64_t>(i)), write_seq,
                          p.logits && i + 1 == p.tokens.size(), static_cast<int32_t>(b.views.size() - 1)});
  }
  for (const BatchToken& t : b.tokens) b.n_logits += t.logits ? 1 : 0;
  return b;
}

// The forward pass into logits_ (a row per token with logits, in plan order). On a GPU, a
// generate's next token is drawn on the device when its sampler allows (then only the token
// comes back into drawn_); its block keeps no logits until its last token runs.
Status Engine::run(const std::vector<Planned>& plan, StepBatch& b) {
  logits_.resize(std::max<size_t>(b.n_logits, 1) * static_cast<size_t>(model_.config.n_vocab));
  draws_.clear();
  drawn_.clear();
  if (pass_->on_gpu() && opts_.sample_on_device) {
    bool any = false;
    for (const Planned& p : plan) {
      if (!p.logits) continue;
      std::optional<PlannedDraw> d;
      if (p.a->req.kind == RequestKind::generate && !p.a->draining)
        d = p.a->sampler->plan_draw(CudaRunner::max_device_top_k());
      any |= d.has_value();
      draws_.push_back(d);
    }
    if (any)
      drawn_.assign(draws_.size(), -1);
    else
      draws_.clear();
  }
  return forward(b.tokens, b.seqs, b.views, draws_, drawn_.data());
}

// What the step did: prefill tokens enter the logs, generates sample (or take the device's
// token) and may stop, probes answer, finished requests end.
void Engine::apply(const std::vector<Planned>& plan, std::vector<Event>& events) {
  const size_t V = static_cast<size_t>(model_.config.n_vocab);
  size_t row = 0;
  for (const Planned& p : plan) {
    Active& a = *p.a;
    Block* w = *blocks_->get(a.target);
    const bool on_device = p.logits && !draws_.empty() && draws_[row].has_value();
    const TokenId device_token = on_device ? drawn_[row] : -1;
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
        if (lg) answer_probe(a, lg, events);
        break;
      case RequestKind::generate:
        if (a.draining) {
          a.pending = -1;
          finish(a, a.drain_reason, events);
        } else if (lg || on_device) {  // not a prefill chunk before the last
          take_token(a, *w, on_device ? device_token : a.sampler->sample({lg, V}, w->tokens), lg, events);
        }
        break;
    }
  }
}

void Engine::answer_probe(Active& a, const float* lg, std::vector<Event>& events) {
  const size_t V = static_cast<size_t>(model_.config.n_vocab);
  double mx = -1e300, sum = 0;
  for (size_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(lg[i]));
  for (size_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(lg[i]) - mx);
  Event e{Event::Type::probe_result, a.id, -1, -1, {}, FinishReason::completed, {}, steps_, {}};
  for (const auto& cand : a.req.candidates) {
    double pr = 0;
    for (TokenId t : cand) pr += std::exp(static_cast<double>(lg[t]) - mx) / sum;
    e.probabilities.push_back(static_cast<float>(pr));
  }
  events.push_back(std::move(e));
  finish(a, FinishReason::completed, events);
}

// A generate's new token: into its block's log and out as an event; then its stop conditions.
// A stopped generate still runs its last token next step, so the block's KV covers its whole log.
void Engine::take_token(Active& a, Block& w, TokenId tok, const float* logits, std::vector<Event>& events) {
  a.decoding = true;
  if (tok == Sampler::kNoToken) {  // its grammar allows no token of the vocabulary here
    finish(a, FinishReason::error, events, kNoTokenMessage);
    return;
  }
  w.tokens.push_back(tok);
  a.pending = tok;
  ++a.generated;
  events.push_back({Event::Type::token, a.id, a.target, tok, {}, FinishReason::completed, {}, steps_, {}});
  if (logits && a.req.sampling.logprobs >= 0)
    events.back().logprobs =
        token_logprobs({logits, static_cast<size_t>(model_.config.n_vocab)}, tok, a.req.sampling.logprobs);
  a.text += a.detok->push(tok);
  const StopCondition& st = a.req.stop;
  std::optional<FinishReason> why;
  if (std::find(st.token_ids.begin(), st.token_ids.end(), tok) != st.token_ids.end())
    why = FinishReason::stop_token;
  else if (st.at_end_of_generation && model_.tokenizer.is_end_of_generation(tok))
    why = FinishReason::end_of_generation;
  else if (const GrammarMatcher* m = a.sampler->matcher(); m && m->ended())
    why = FinishReason::end_of_generation;  // the output is whole and its grammar took the end
  else if (a.generated >= st.max_tokens)
    why = FinishReason::max_tokens;
  else
    for (const std::string& s : st.strings)
      if (!s.empty() && a.text.size() >= s.size() &&
          a.text.compare(a.text.size() - s.size(), s.size(), s) == 0) {
        why = FinishReason::stop_string;
        break;
      }
  if (why) {
    a.draining = true;
    a.drain_reason = *why;
  }
}

std::vector<Event> Engine::cancel(std::span<const BlockId> blocks, const std::string& why) {
  std::vector<Event> events;
  auto named = [&](BlockId b) { return std::find(blocks.begin(), blocks.end(), b) != blocks.end(); };
  for (auto& a : active_) {
    if (a->done) continue;
    bool uses = a->req.kind != RequestKind::probe && named(a->req.write_to);
    for (BlockId b : a->req.view) uses = uses || named(b);
    if (uses) finish(*a, FinishReason::error, events, why);
  }
  forget_finished();
  return events;
}

void Engine::forget_finished() {
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& a) { return a->done; }),
                active_.end());
  counters_->in_flight.store(static_cast<int64_t>(active_.size()), std::memory_order_relaxed);
}

}  // namespace chorus
