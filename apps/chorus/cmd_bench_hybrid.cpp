// `chorus bench --hybrid`: block views over a hybrid (Gated DeltaNet) model, on the engine.
//   1. decode with G = 1 and 8 concurrent generates, each seeing a view of 3 context blocks, vs
//      the same context as one block (contiguous): tokens/s and the ratio;
//   2. the share of decode time spent building view states (composition from the blocks'
//      summaries, the new tokens' convolution), with a static view and with a context block
//      that another generate extends every step (the view changes every step);
//   3. the memory a block keeps for the linear layers.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/chorus/bench_common.h"
#include "apps/chorus/commands.h"
#include "device/cpu_device.h"
#include "engine/forward/linear_state.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"

namespace chorus::app {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<TokenId> text_tokens(const Tokenizer& tok, size_t n) {
  return repeated_tokens(
      tok,
      "A robot arm reports its joint temperatures every second; the monitor reads them, thinks "
      "about trends, and writes a short note when something drifts. ",
      n);
}

Request gen(BlockId w, std::vector<BlockId> view, int n) {
  return greedy_generate(w, std::move(view), 0, n);
}

struct Decode {
  double tok_s = 0;
  double compose_share = 0;  // composing view states / decode time
  double factor_share = 0;   // convolution + query reads / decode time
  int64_t compositions = 0;
  double ms_per_step = 0;
};

// Runs until idle, timing only the steps; returns tokens/s and the view-state share.
Decode drain_timed(Engine& e, int64_t counted_block = -1) {
  e.cpu_runner()->reset_linear_stats();
  int64_t tokens = 0, steps = 0;
  const auto t0 = Clock::now();
  while (!e.idle()) {
    auto ev = e.step();
    if (!ev) return {};
    ++steps;
    for (const Event& x : *ev)
      tokens += x.type == Event::Type::token && (counted_block < 0 || x.block != counted_block);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto& st = e.cpu_runner()->linear_stats();
  return {static_cast<double>(tokens) / secs, st.compose_seconds / secs, st.factor_seconds / secs,
          st.compositions, secs * 1e3 / static_cast<double>(steps)};
}

}  // namespace

int run_bench_hybrid(const BenchArgs& args, const Model& m, CpuDevice& device, nlohmann::json& out) {
  if (!m.config.hybrid()) {
    std::fprintf(stderr, "chorus bench --hybrid: %s is not a hybrid model (architecture %s)\n",
                 args.model.c_str(), m.config.arch.c_str());
    return 2;
  }
  const int ctx = std::max(args.pp, 3), tg = std::max(args.tg, 1), reps = std::max(1, args.reps);
  const auto context = text_tokens(m.tokenizer, static_cast<size_t>(ctx));
  const EngineOptions opts{.n_pages = 4096, .token_budget = 256};
  std::printf("  context %d tokens, %d generated per generate, best of %d\n", ctx, tg, reps);

  // Context as one block, or as 3 blocks each written seeing the ones before it.
  auto make_context = [&](Engine& e, int n_blocks) {
    std::vector<BlockId> view;
    const size_t per = context.size() / static_cast<size_t>(n_blocks);
    for (int b = 0; b < n_blocks; ++b) {
      const BlockId id = e.blocks().create();
      const auto first = context.begin() + static_cast<long>(static_cast<size_t>(b) * per);
      const auto last = b + 1 == n_blocks ? context.end() : first + static_cast<long>(per);
      (void)e.submit(Request::forward(id, {first, last}, view));
      while (!e.idle()) (void)e.step();
      view.push_back(id);
    }
    return view;
  };

  for (int G : {1, 8}) {
    Decode best[2];
    for (int r = 0; r < reps; ++r)
      for (int v = 0; v < 2; ++v) {  // 0: contiguous, 1: view of 3 blocks
        auto e = Engine::create(m, device, opts);
        if (!report("bench", e)) return 1;
        const auto view = make_context(**e, v ? 3 : 1);
        for (int i = 0; i < G; ++i) (void)(*e)->submit(gen((*e)->blocks().create(), view, tg));
        const Decode d = drain_timed(**e);
        if (d.tok_s > best[v].tok_s) best[v] = d;
      }
    std::printf(
        "  %d generate%s  contiguous %8.2f tok/s   view of 3 %8.2f tok/s   view/contiguous %.3fx   "
        "composing %.2f%% of decode (%lld compositions), convolution + query reads %.2f%% (contiguous "
        "%.2f%%)\n",
        G, G == 1 ? " " : "s", best[0].tok_s, best[1].tok_s, best[1].tok_s / best[0].tok_s,
        100.0 * best[1].compose_share, static_cast<long long>(best[1].compositions),
        100.0 * best[1].factor_share, 100.0 * best[0].factor_share);
    out["decode"][std::to_string(G)] = {{"contiguous_tok_s", best[0].tok_s},
                                        {"view3_tok_s", best[1].tok_s},
                                        {"view3_over_contiguous", best[1].tok_s / best[0].tok_s},
                                        {"compose_share", best[1].compose_share},
                                        {"factor_share", best[1].factor_share},
                                        {"contiguous_factor_share", best[0].factor_share},
                                        {"compositions", best[1].compositions},
                                        {"ms_per_step", best[1].ms_per_step}};
  }

  // A view that changes every step: 8 writers see [context x3, thoughts] while a thinker
  // extends "thoughts" (the AsyncLLM pattern); every writer's state is recomposed per step.
  {
    Decode best;
    for (int r = 0; r < reps; ++r) {
      auto e = Engine::create(m, device, opts);
      if (!report("bench", e)) return 1;
      auto view = make_context(**e, 3);
      const BlockId thoughts = (*e)->blocks().create("thoughts");
      (void)(*e)->submit(gen(thoughts, view, tg + 8));
      view.push_back(thoughts);
      for (int i = 0; i < 8; ++i) (void)(*e)->submit(gen((*e)->blocks().create(), view, tg));
      const Decode d = drain_timed(**e, thoughts);
      if (d.tok_s > best.tok_s) best = d;
    }
    std::printf(
        "  8 writers + 1 thinker extending their view: writers %8.2f tok/s, composing %.2f%% of decode "
        "(%lld compositions), convolution + query reads %.2f%%\n",
        best.tok_s, 100.0 * best.compose_share, static_cast<long long>(best.compositions),
        100.0 * best.factor_share);
    out["growing_view"] = {{"writers_tok_s", best.tok_s},
                           {"compose_share", best.compose_share},
                           {"factor_share", best.factor_share},
                           {"compositions", best.compositions},
                           {"ms_per_step", best.ms_per_step}};
  }

  // Memory a block keeps for the linear layers.
  {
    auto e = Engine::create(m, device, opts);
    if (!report("bench", e)) return 1;
    const auto view = make_context(**e, 3);
    const BlockId w = (*e)->blocks().create();
    (void)(*e)->submit(gen(w, view, 4));
    while (!(*e)->idle()) (void)(*e)->step();
    auto bytes_of = [&](BlockId id) {
      const Block& b = **(*e)->blocks().get(id);
      size_t n = 0;
      for (const Extent& x : b.extents) n += x.kv.linear ? x.kv.linear->bytes() : 0;
      return std::pair{n, b.n_cached()};
    };
    const auto [ctx_bytes, ctx_tokens] = bytes_of(view[2]);
    const auto [w_bytes, w_tokens] = bytes_of(w);
    std::printf(
        "  linear-layer state: context block (%lld tokens) %.1f MiB, a finished generated block (%lld "
        "tokens) %.1f MiB\n",
        static_cast<long long>(ctx_tokens), ctx_bytes / 1048576.0, static_cast<long long>(w_tokens),
        w_bytes / 1048576.0);
    out["linear_state_bytes"] = {{"context_block", ctx_bytes},
                                 {"context_tokens", ctx_tokens},
                                 {"generated_block", w_bytes},
                                 {"generated_tokens", w_tokens}};
  }
  return 0;
}

}  // namespace chorus::app
