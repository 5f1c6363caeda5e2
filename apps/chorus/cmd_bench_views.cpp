// `chorus bench --views`: what cache blocks and views cost and save, on the engine.
//   1. decode with a view of 4 blocks vs the same tokens in one block
//   2. 8 generations over one shared 1k-token prompt block vs 8 private copies of the prompt
//   3. per-step overhead of the node's actors (memory actor + batcher) against the bare engine (8 decodes)
//   4. probe latency with a 4k-token prefill queued and 4 generates running
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include <caf/all.hpp>

#include "actors/atoms.h"
#include "actors/batcher.h"
#include "apps/chorus/bench_common.h"
#include "apps/chorus/commands.h"
#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "net/codec.h"

namespace chorus::app {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<TokenId> filler(const Tokenizer& tok, size_t n) {
  return repeated_tokens(
      tok,
      "Engineers measure before they optimize, and they keep the measurements next to the code so "
      "that the next person can run them again. ",
      n);
}

Request generate(BlockId w, std::vector<BlockId> view, TokenId start, int n) {
  return greedy_generate(w, std::move(view), start, n);
}

// Runs the engine until idle; returns (generated tokens, seconds spent in steps after `from`).
std::pair<int64_t, double> drain(Engine& e) {
  int64_t tokens = 0;
  const auto t0 = Clock::now();
  while (!e.idle()) {
    auto ev = e.step();
    if (!ev) return {0, 0};
    for (const Event& x : *ev) tokens += x.type == Event::Type::token;
  }
  return {tokens, since(t0)};
}

}  // namespace

int run_bench_views(const BenchArgs& args, const Model& m, CpuDevice& device, CudaDevice* gpu,
                    nlohmann::json& out) {
  const int reps = std::max(1, args.reps);
  // 1. View of 4 blocks vs contiguous: decode 128 tokens after 1024 context tokens.
  double best_view = 1e30, best_flat = 1e30;
  for (int r = 0; r < reps; ++r)
    for (bool views : {false, true}) {
      auto e = Engine::create(m, device, {.n_pages = 256, .token_budget = 256}, gpu);
      if (!report("bench", e)) return 1;
      const auto ctx = filler(m.tokenizer, 1024);
      std::vector<BlockId> view;
      for (int b = 0; b < (views ? 4 : 1); ++b) {
        const BlockId id = (*e)->blocks().create();
        const size_t n = ctx.size() / (views ? 4 : 1);
        (void)(*e)->submit(Request::forward(
            id, {ctx.begin() + static_cast<long>(b * n), ctx.begin() + static_cast<long>((b + 1) * n)},
            view));
        drain(**e);
        view.push_back(id);
      }
      const BlockId w = (*e)->blocks().create();
      (void)(*e)->submit(generate(w, view, 198, 128));
      const auto [tokens, secs] = drain(**e);
      (views ? best_view : best_flat) =
          std::min(views ? best_view : best_flat, secs / static_cast<double>(tokens));
    }
  std::printf("  decode, view of 4 x 256-token blocks   %8.3f ms/token\n", best_view * 1e3);
  std::printf("  decode, one 1024-token block           %8.3f ms/token   (view/contiguous %.3fx)\n",
              best_flat * 1e3, best_view / best_flat);
  out["view4_ms_per_token"] = best_view * 1e3;
  out["contiguous_ms_per_token"] = best_flat * 1e3;
  out["view4_over_contiguous"] = best_view / best_flat;

  // 2. 8 generations over one shared 1k-token prompt vs 8 private copies.
  for (bool shared : {true, false}) {
    double best = 1e30;
    int64_t pages = 0, tokens = 0;
    for (int r = 0; r < reps; ++r) {
      auto e = Engine::create(m, device, {.n_pages = 1024, .token_budget = 256}, gpu);
      if (!report("bench", e)) return 1;
      const auto prompt = filler(m.tokenizer, 1024);
      std::vector<BlockId> prompts;
      for (int i = 0; i < (shared ? 1 : 8); ++i) {
        prompts.push_back((*e)->blocks().create());
        (void)(*e)->submit(Request::forward(prompts.back(), prompt));
      }
      drain(**e);
      for (int i = 0; i < 8; ++i)
        (void)(*e)->submit(
            generate((*e)->blocks().create(), {prompts[shared ? 0 : static_cast<size_t>(i)]}, 198, 64));
      const auto [n, secs] = drain(**e);
      if (secs < best) best = secs;
      tokens = n;
      pages = (*e)->blocks().kv().n_pages() - (*e)->blocks().kv().n_free();
    }
    std::printf("  8 generations, %-8s prompt          %8.1f tok/s aggregate, %lld KV pages\n",
                shared ? "shared" : "private", static_cast<double>(tokens) / best,
                static_cast<long long>(pages));
    out[shared ? "shared_prompt" : "private_prompts"] = {{"tok_s", tokens / best}, {"pages", pages}};
  }

  // 3. Actor overhead: the same decode workload on the bare engine and through the node's actors
  // (frames to the memory actor, which submits them to the batcher; events back from the batcher).
  {
    const auto prompt_toks = filler(m.tokenizer, 256);
    double bare = 1e30, actors = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto e = Engine::create(m, device, {.n_pages = 256, .token_budget = 256}, gpu);
      if (!report("bench", e)) return 1;
      const BlockId p = (*e)->blocks().create();
      (void)(*e)->submit(Request::forward(p, prompt_toks));
      drain(**e);
      for (int i = 0; i < 8; ++i) (void)(*e)->submit(generate((*e)->blocks().create(), {p}, 198, 64));
      const int64_t s0 = (*e)->steps();
      const auto [n, secs] = drain(**e);
      bare = std::min(bare, secs / static_cast<double>((*e)->steps() - s0));
      (void)n;
    }
    for (int r = 0; r < reps; ++r) {
      auto e = Engine::create(m, device, {.n_pages = 256, .token_budget = 256}, gpu);
      if (!report("bench", e)) return 1;
      std::shared_ptr<Engine> engine = std::move(*e);
      caf::actor_system_config cfg;
      cfg.set("scheduler.max-threads", 2);
      caf::actor_system sys{cfg};
      caf::actor batcher = spawn_batcher(sys, engine);
      caf::scoped_actor self{sys};
      auto call = [&](const Frame& f) {
        Reply out;
        self->request(batcher, caf::infinite, frame_atom::value, f)
            .receive([&](const std::vector<uint8_t>& rep) { out = *decode_reply(rep); }, [](caf::error&) {});
        return out;
      };
      auto wait_finished = [&](int n) {
        for (int done = 0; done < n;)
          self->receive([&](event_atom, const std::vector<uint8_t>& f) {
            done += decode_reply(f)->kind == ReplyKind::finished;
          });
      };
      const auto p = static_cast<BlockId>(call(encode_create_block(1, "prompt")).id);
      call(encode_request(2, Request::forward(p, prompt_toks)));
      wait_finished(1);
      std::vector<BlockId> outs;
      for (int i = 0; i < 8; ++i)
        outs.push_back(static_cast<BlockId>(call(encode_create_block(3, "out")).id));
      const int64_t s0 = engine->steps();
      const auto t0 = Clock::now();
      for (int i = 0; i < 8; ++i)
        call(encode_request(4, generate(outs[static_cast<size_t>(i)], {p}, 198, 64)));
      wait_finished(8);
      const double secs = since(t0);
      self->send(batcher, stop_atom::value);
      self->wait_for(batcher);
      actors = std::min(actors, secs / static_cast<double>(engine->steps() - s0));
    }
    std::printf("  step time, 8 decodes: bare engine %.3f ms, through the node's actors %.3f ms (%+.1f %%)\n",
                bare * 1e3, actors * 1e3, (actors / bare - 1) * 100);
    out["step_ms_bare"] = bare * 1e3;
    out["step_ms_actors"] = actors * 1e3;
    out["actor_overhead"] = actors / bare - 1;
  }

  // 4. Probe latency: 4k-token prefill queued, 4 generates running.
  {
    auto e = Engine::create(m, device, {.n_pages = 1024, .token_budget = 256}, gpu);
    if (!report("bench", e)) return 1;
    (void)(*e)->submit(Request::forward((*e)->blocks().create(), filler(m.tokenizer, 4096)));
    for (int i = 0; i < 4; ++i) (void)(*e)->submit(generate((*e)->blocks().create(), {}, 198, 400));
    for (int i = 0; i < 4; ++i) (void)(*e)->step();
    const Request p = Request::probe({}, m.tokenizer.encode(" Is anything wrong? Answer yes or no:"),
                                     {m.tokenizer.encode(" yes"), m.tokenizer.encode(" no")});
    const int64_t s0 = (*e)->steps();
    const auto t0 = Clock::now();
    auto id = (*e)->submit(p);
    if (!report("bench", id)) return 1;
    int64_t steps = -1;
    double ms = 0;
    while (steps < 0 && !(*e)->idle()) {
      auto ev = (*e)->step();
      if (!ev) return 1;
      for (const Event& x : *ev)
        if (x.type == Event::Type::probe_result && x.request == *id) {
          steps = x.step - s0 + 1;
          ms = since(t0) * 1e3;
        }
    }
    std::printf("  probe under load (4k prefill + 4 decodes) answered after %lld step(s), %.1f ms\n",
                static_cast<long long>(steps), ms);
    out["probe_steps"] = steps;
    out["probe_ms"] = ms;
  }
  return 0;
}

}  // namespace chorus::app
