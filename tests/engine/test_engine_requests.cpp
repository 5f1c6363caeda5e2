// The request/step engine: blocks, views, FIFO writers, chunked prefill, probes, live
// visibility, merge/fork, and bad requests.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "device/cpu_device.h"
#include "engine/step/engine.h"
#include "engine/step/generator.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

class EngineRequests : public ::testing::Test {
 protected:
  void load(const std::string& path, EngineOptions o = {}) {
    ASSERT_NO_FATAL_FAILURE(test::load_model(path, &model_, &device_));
    auto e = Engine::create(*model_, *device_, o);
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    engine_ = std::move(*e);
  }
  void load_tiny(EngineOptions o = {}) { load(test::goldens_dir() + "/tiny_llama_f32.gguf", o); }

  std::vector<TokenId> random_tokens(int n) {
    std::uniform_int_distribution<int> d(0, model_->config.n_vocab - 3);  // no special tokens
    std::vector<TokenId> v(static_cast<size_t>(n));
    for (auto& t : v) t = d(rng_);
    return v;
  }

  std::vector<Event> run_until_idle(int max_steps = 10000) {
    std::vector<Event> all;
    for (int i = 0; i < max_steps && !engine_->idle(); ++i) {
      auto ev = engine_->step();
      EXPECT_TRUE(ev.ok());
      all.insert(all.end(), ev->begin(), ev->end());
    }
    EXPECT_TRUE(engine_->idle());
    return all;
  }

  static Request forward(BlockId w, std::vector<TokenId> toks, std::vector<BlockId> view = {}) {
    return Request::forward(w, std::move(toks), std::move(view));
  }
  static Request probe(std::vector<BlockId> view, std::vector<TokenId> q,
                       std::vector<std::vector<TokenId>> c) {
    return Request::probe(std::move(view), std::move(q), std::move(c));
  }
  // Runs a probe alone and returns its candidate probabilities.
  std::vector<float> probe_now(std::vector<BlockId> view, std::vector<TokenId> q,
                               std::vector<std::vector<TokenId>> c) {
    auto id = engine_->submit(probe(std::move(view), std::move(q), std::move(c)));
    EXPECT_TRUE(id.ok()) << id.error().to_string();
    for (const Event& e : run_until_idle())
      if (e.type == Event::Type::probe_result && e.request == *id) return e.probabilities;
    return {};
  }

  std::mt19937 rng_{7};
  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineRequests, GenerateMatchesTheSingleSequenceGenerator) {
  CHORUS_REQUIRE_DEFAULT_MODEL(g);
  (void)g;
  load(default_model_path());
  const auto prompt = model_->tokenizer.encode(
      *model_->chat->apply({{"user", "What is the capital of France?"}}), {.parse_special = true});
  GenerateOptions o;
  o.n_ctx = 128;
  o.max_new_tokens = 16;
  o.stop_at_end_of_generation = false;
  o.sampling = SamplingParams::greedy();
  auto gen = Generator::create(*model_, *device_, 1, o);
  ASSERT_TRUE(gen.ok());
  ASSERT_TRUE((*gen)->run(prompt, nullptr).ok());

  const BlockId w = engine_->blocks().create("answer");
  Request r;
  r.kind = RequestKind::generate;
  r.write_to = w;
  r.tokens = prompt;
  r.sampling = SamplingParams::greedy();
  r.stop.max_tokens = 16;
  r.stop.at_end_of_generation = false;
  ASSERT_TRUE(engine_->submit(r).ok());
  std::vector<TokenId> got;
  FinishReason reason = FinishReason::error;
  for (const Event& e : run_until_idle()) {
    if (e.type == Event::Type::token) got.push_back(e.token);
    if (e.type == Event::Type::finished) reason = e.reason;
  }
  EXPECT_EQ(got, (*gen)->outputs()[0]);
  EXPECT_EQ(reason, FinishReason::max_tokens);
  auto blk = engine_->blocks().get(w);
  EXPECT_EQ((*blk)->n_cached(), static_cast<int64_t>((*blk)->tokens.size()))
      << "the last token's KV is written too";
}

// A generate with no prefill goes on from where the block's last writer stopped: 10 greedy
// tokens then 14 more (submitted while the first still runs) are the 24 of one generate.
TEST_F(EngineRequests, AGenerateWithoutPrefillContinuesTheBlock) {
  load_tiny();
  const auto prompt = random_tokens(20);
  auto greedy = [](BlockId w, std::vector<TokenId> prefill, int n) {
    StopCondition stop;
    stop.max_tokens = n;
    stop.at_end_of_generation = false;
    return Request::generate(w, {}, std::move(prefill), SamplingParams::greedy(), stop);
  };
  const BlockId whole = engine_->blocks().create("whole"), split = engine_->blocks().create("split");
  ASSERT_TRUE(engine_->submit(greedy(whole, prompt, 24)).ok());
  run_until_idle();
  ASSERT_TRUE(engine_->submit(greedy(split, prompt, 10)).ok());
  ASSERT_TRUE(engine_->submit(greedy(split, {}, 14)).ok()) << "its writer will leave logits";
  run_until_idle();
  EXPECT_EQ((*engine_->blocks().get(split))->tokens, (*engine_->blocks().get(whole))->tokens);
  // And after it has finished, from the logits it left.
  ASSERT_TRUE(engine_->submit(greedy(split, {}, 3)).ok());
  ASSERT_TRUE(engine_->submit(greedy(whole, {}, 3)).ok());
  run_until_idle();
  EXPECT_EQ((*engine_->blocks().get(split))->tokens, (*engine_->blocks().get(whole))->tokens);
  EXPECT_EQ((*engine_->blocks().get(split))->tokens.size(), 20u + 27u);
}

TEST_F(EngineRequests, ParallelGeneratesShareOnePromptBlock) {
  load_tiny();
  const BlockId prompt = engine_->blocks().create("prompt");
  ASSERT_TRUE(engine_->submit(forward(prompt, random_tokens(40))).ok());
  run_until_idle();
  const int64_t free_before = engine_->blocks().kv().n_free();
  std::vector<BlockId> answers;
  for (int i = 0; i < 4; ++i) {
    answers.push_back(engine_->blocks().create("answer"));
    Request r;
    r.kind = RequestKind::generate;
    r.view = {prompt};
    r.write_to = answers.back();
    r.tokens = {5};
    r.sampling.seed = static_cast<uint64_t>(i);
    r.stop.max_tokens = 10;
    ASSERT_TRUE(engine_->submit(r).ok());
  }
  std::map<RequestId, int> tokens;
  for (const Event& e : run_until_idle())
    if (e.type == Event::Type::token) ++tokens[e.request];
  ASSERT_EQ(tokens.size(), 4u);
  for (auto& [id, n] : tokens) EXPECT_EQ(n, 10);
  // The prompt's pages were not copied: the 4 answers used 4 pages, one each.
  EXPECT_EQ(free_before - engine_->blocks().kv().n_free(), 4);
}

TEST_F(EngineRequests, WritersOfOneBlockRunInSubmissionOrderWithoutInterleaving) {
  load_tiny({.n_pages = 256, .token_budget = 7});
  const BlockId x = engine_->blocks().create("log");
  std::vector<TokenId> expected;
  std::uniform_int_distribution<int> size(1, 20);
  for (int i = 0; i < 8; ++i) {
    const auto toks = random_tokens(size(rng_));
    expected.insert(expected.end(), toks.begin(), toks.end());
    ASSERT_TRUE(engine_->submit(forward(x, toks)).ok());
  }
  std::vector<RequestId> finished;
  for (const Event& e : run_until_idle())
    if (e.type == Event::Type::finished) finished.push_back(e.request);
  EXPECT_TRUE(std::is_sorted(finished.begin(), finished.end()));
  EXPECT_EQ((*engine_->blocks().get(x))->tokens, expected);
  EXPECT_EQ((*engine_->blocks().get(x))->n_cached(), static_cast<int64_t>(expected.size()));
}

TEST_F(EngineRequests, ProbeReturnsWithinTwoStepsBehindALongPrefillAndDecodes) {
  load_tiny({.n_pages = 1024, .token_budget = 64});
  const BlockId big = engine_->blocks().create("document");
  ASSERT_TRUE(engine_->submit(forward(big, random_tokens(4000))).ok());
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.kind = RequestKind::generate;
    r.write_to = engine_->blocks().create("g");
    r.tokens = {3};
    r.stop.max_tokens = 200;
    r.stop.at_end_of_generation = false;
    ASSERT_TRUE(engine_->submit(r).ok());
  }
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine_->step().ok());
  const int64_t s = engine_->steps();
  auto id = engine_->submit(probe({}, random_tokens(8), {{1}, {2}}));
  ASSERT_TRUE(id.ok());
  int64_t answered = -1;
  for (int i = 0; i < 3 && answered < 0; ++i) {
    auto ev = engine_->step();
    ASSERT_TRUE(ev.ok());
    for (const Event& e : *ev)
      if (e.type == Event::Type::probe_result && e.request == *id) answered = e.step;
  }
  ASSERT_GE(answered, 0) << "the probe did not return within 3 steps";
  EXPECT_LE(answered, s + 2);
}

// Balanced batching: a short forward (a writer's prefill, a source's line) submitted behind a
// 4,000-token prefill runs in the next step, not after it; two long prefills advance together;
// the budget is used whole. With chunks as long as the budget (min_prefill_chunk = 64: one
// prefill a step, oldest first, as before balanced batching) the short one waits 62 steps, until
// the long one is done.
TEST_F(EngineRequests, AShortPrefillIsNotHeldBehindALongOne) {
  for (int min_chunk : {16, 64}) {
    load_tiny({.n_pages = 1024, .token_budget = 64, .min_prefill_chunk = min_chunk});
    const BlockId big = engine_->blocks().create("document");
    ASSERT_TRUE(engine_->submit(forward(big, random_tokens(4000))).ok());
    ASSERT_TRUE(engine_->step().ok());
    const BlockId small = engine_->blocks().create("line");
    auto id = engine_->submit(forward(small, random_tokens(20)));
    ASSERT_TRUE(id.ok());
    const int64_t submitted = engine_->steps();
    int64_t finished = -1;
    for (int i = 0; i < 100 && finished < 0; ++i) {
      auto ev = engine_->step();
      ASSERT_TRUE(ev.ok());
      for (const Event& e : *ev)
        if (e.type == Event::Type::finished && e.request == *id) finished = e.step;
    }
    ASSERT_GE(finished, 0);
    // Steps count from 0: the next step after the submission is number `submitted`.
    EXPECT_EQ(finished - submitted, min_chunk == 16 ? 0 : 62) << "steps the short prefill waited";
    if (min_chunk != 16) continue;
    // The long one had the rest of that step: 64 + 44 cached now.
    EXPECT_EQ((*engine_->blocks().get(big))->n_cached(), 64 + 44);
    // A second long prefill: from now on each gets 32 a step.
    const BlockId other = engine_->blocks().create("other");
    ASSERT_TRUE(engine_->submit(forward(other, random_tokens(1000))).ok());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(engine_->step().ok());
    EXPECT_EQ((*engine_->blocks().get(big))->n_cached(), 64 + 44 + 320);
    EXPECT_EQ((*engine_->blocks().get(other))->n_cached(), 320);
  }
}

// fair_shares against the definition of a max-min fair split: nobody gets more than it wants,
// the budget is used whole when the served want it, and a request cut short gets no less than
// any other served request but one token (the integer remainder); only the oldest
// budget / min_chunk are served.
TEST(FairShares, IsAMaxMinFairSplit) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(fair_shares({}, 256, 16), V{});
  EXPECT_EQ(fair_shares({4000}, 256, 16), V{256});
  EXPECT_EQ(fair_shares({4000, 20}, 256, 16), (V{236, 20}));
  EXPECT_EQ(fair_shares({100, 100}, 256, 16), (V{100, 100}));
  EXPECT_EQ(fair_shares({300, 300}, 256, 16), (V{128, 128}));
  EXPECT_EQ(fair_shares({300, 300, 300}, 256, 16), (V{85, 85, 86}));
  EXPECT_EQ(fair_shares({50, 50}, 10, 16), (V{10, 0}));  // a budget under one chunk: the oldest
  EXPECT_EQ(fair_shares({5, 5}, 0, 16), (V{0, 0}));
  V many(20, 1000), want(20, 0);
  for (size_t i = 0; i < 16; ++i) want[i] = 16;
  EXPECT_EQ(fair_shares(many, 256, 16), want);  // 16 chunks of 16: the oldest 16

  std::mt19937 rng(11);
  std::uniform_int_distribution<int> n_of(1, 24), want_of(1, 400), budget_of(0, 600);
  for (int round = 0; round < 2000; ++round) {
    V wants(static_cast<size_t>(n_of(rng)));
    for (auto& w : wants) w = want_of(rng);
    const int64_t budget = budget_of(rng), min_chunk = 16;
    const V got = fair_shares(wants, budget, min_chunk);
    ASSERT_EQ(got.size(), wants.size());
    const size_t served =
        std::min(wants.size(), static_cast<size_t>(std::max<int64_t>(1, budget / min_chunk)));
    int64_t sum = 0, served_want = 0;
    for (size_t i = 0; i < wants.size(); ++i) {
      ASSERT_GE(got[i], 0);
      ASSERT_LE(got[i], wants[i]);
      if (i >= served) {
        ASSERT_EQ(got[i], 0) << "a younger request got a chunk before an older one";
      }
      sum += got[i];
      if (i < served) served_want += wants[i];
    }
    ASSERT_EQ(sum, std::min(budget, served_want)) << "round " << round;
    for (size_t i = 0; i < served; ++i)
      if (got[i] < wants[i]) {
        for (size_t j = 0; j < served; ++j) ASSERT_GE(got[i], got[j] - 1) << "round " << round;
      }
  }
}

TEST_F(EngineRequests, NoRequestStarvesUnderAMixedWorkload) {
  load_tiny({.n_pages = 2048, .token_budget = 32});
  std::uniform_int_distribution<int> kind(0, 2), len(1, 60);
  std::map<RequestId, int64_t> submitted;
  std::map<RequestId, int64_t> done;
  for (int round = 0; round < 40; ++round) {
    const int k = kind(rng_);
    Request r;
    if (k == 0) r = forward(engine_->blocks().create(), random_tokens(len(rng_)));
    if (k == 1) {
      r.kind = RequestKind::generate;
      r.write_to = engine_->blocks().create();
      r.tokens = random_tokens(len(rng_));
      r.stop.max_tokens = len(rng_);
      r.stop.at_end_of_generation = false;
    }
    if (k == 2) r = probe({}, random_tokens(len(rng_)), {{1}});
    auto id = engine_->submit(r);
    ASSERT_TRUE(id.ok());
    submitted[*id] = engine_->steps();
    auto ev = engine_->step();
    ASSERT_TRUE(ev.ok());
    for (const Event& e : *ev)
      if (e.type == Event::Type::finished) done[e.request] = e.step;
  }
  for (const Event& e : run_until_idle())
    if (e.type == Event::Type::finished) done[e.request] = e.step;
  ASSERT_EQ(done.size(), submitted.size());
  // Bounded wait: 40 requests of at most 60 prompt + 60 generated tokens at 32 tokens a step.
  for (auto& [id, at] : submitted) EXPECT_LE(done[id] - at, 200) << "request " << id;
}

TEST_F(EngineRequests, ReadersSeeAWritersTokensOnTheirNextStep) {
  load_tiny();
  const BlockId ctx = engine_->blocks().create("ctx");
  const auto ctx_toks = random_tokens(12);
  ASSERT_TRUE(engine_->submit(forward(ctx, ctx_toks)).ok());
  run_until_idle();
  const BlockId x = engine_->blocks().create("x");
  Request w;
  w.kind = RequestKind::generate;
  w.view = {ctx};
  w.write_to = x;
  w.tokens = {4};
  w.sampling = SamplingParams::greedy();
  w.stop.max_tokens = 6;
  w.stop.at_end_of_generation = false;
  ASSERT_TRUE(engine_->submit(w).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine_->step().ok());
  // After these steps x has some tokens cached; a probe over [ctx, x] now must equal one over a
  // block holding the same tokens contiguously.
  const Block* xb = *engine_->blocks().get(x);
  const int64_t cached = xb->n_cached();
  ASSERT_GT(cached, 1);
  const std::vector<TokenId> seen(xb->tokens.begin(), xb->tokens.begin() + cached);
  const auto q = random_tokens(3);
  auto id = engine_->submit(probe({ctx, x}, q, {{1}, {2}, {3}}));
  ASSERT_TRUE(id.ok());
  auto ev = engine_->step();  // the probe runs next to the writer's next token
  ASSERT_TRUE(ev.ok());
  std::vector<float> live;
  for (const Event& e : *ev)
    if (e.type == Event::Type::probe_result) live = e.probabilities;
  ASSERT_EQ(live.size(), 3u);
  run_until_idle();
  const BlockId flat = engine_->blocks().create("flat");
  std::vector<TokenId> all = ctx_toks;
  all.insert(all.end(), seen.begin(), seen.end());
  ASSERT_TRUE(engine_->submit(forward(flat, all)).ok());
  run_until_idle();
  const auto want = probe_now({flat}, q, {{1}, {2}, {3}});
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(live[i], want[i], 1e-5f * std::max(want[i], 1e-3f) + 1e-7f);
}

TEST_F(EngineRequests, MergeEqualsTheViewOfItsPartsAndForkIsCopyOnWrite) {
  load_tiny();
  const BlockId a = engine_->blocks().create("a"), b = engine_->blocks().create("b");
  const int64_t free_start = engine_->blocks().kv().n_free();
  ASSERT_TRUE(engine_->submit(forward(a, random_tokens(21))).ok());
  ASSERT_TRUE(engine_->submit(forward(b, random_tokens(9), {a})).ok());
  run_until_idle();
  auto m = engine_->blocks().merge(a, b, "ab");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const auto q = random_tokens(4);
  const std::vector<std::vector<TokenId>> cands = {{1}, {7}, {9, 10}};
  const auto via_view = probe_now({a, b}, q, cands);
  const auto via_merge = probe_now({*m}, q, cands);
  EXPECT_EQ(via_view, via_merge);
  // Fork a prefix of a and write into the fork: a itself must not change.
  auto f = engine_->blocks().fork(a, 18, "fork");
  ASSERT_TRUE(f.ok());
  const auto before = probe_now({a}, q, cands);
  ASSERT_TRUE(engine_->submit(forward(*f, random_tokens(11))).ok());
  run_until_idle();
  EXPECT_EQ(probe_now({a}, q, cands), before);
  EXPECT_EQ((*engine_->blocks().get(*f))->tokens.size(), 29u);
  // Freeing everything returns every page.
  for (BlockId id : {a, b, *m, *f}) ASSERT_TRUE(engine_->blocks().free(id).ok());
  EXPECT_EQ(engine_->blocks().kv().n_free(), free_start);
}

TEST_F(EngineRequests, BadRequestsAreErrors) {
  load_tiny({.n_pages = 64, .token_budget = 16, .max_view_tokens = 100});
  const BlockId a = engine_->blocks().create("a");
  ASSERT_TRUE(engine_->blocks().free(a).ok());
  auto r = engine_->submit(probe({a}, {1}, {{1}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("block 0 was freed"), std::string::npos) << r.error().message;
  const BlockId b = engine_->blocks().create("b");
  r = engine_->submit(probe({b}, {1}, {}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no candidates"), std::string::npos);
  r = engine_->submit(probe({b, b}, {1}, {{1}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("names block 1 twice"), std::string::npos);
  r = engine_->submit(forward(b, random_tokens(150)));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);
  Request g;
  g.kind = RequestKind::generate;
  g.write_to = b;
  g.stop.max_tokens = 10;
  r = engine_->submit(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("nothing to start from"), std::string::npos);
  // A held block cannot be freed.
  ASSERT_TRUE(engine_->submit(forward(b, random_tokens(40))).ok());
  auto fr = engine_->blocks().free(b);
  ASSERT_FALSE(fr.ok());
  EXPECT_NE(fr.error().message.find("pending request(s) still use it"), std::string::npos);
  run_until_idle();
  EXPECT_TRUE(engine_->blocks().free(b).ok());
}

// A request that may write more than the whole pool is refused when it is submitted
// (out_of_memory, which node and HTTP clients get as such); one that fits the pool but finds it
// taken runs until the pool is full and finishes with a reason.
TEST_F(EngineRequests, ARequestLargerThanThePoolIsRefusedAndOneThatRunsOutFinishesWithAReason) {
  load_tiny({.n_pages = 4, .token_budget = 16, .max_view_tokens = 1000});
  const BlockId a = engine_->blocks().create("a"), b = engine_->blocks().create("b");
  auto never = engine_->submit(forward(a, random_tokens(100)));
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.error().code, Errc::out_of_memory);
  EXPECT_NE(never.error().message.find("the pool has 4 pages"), std::string::npos) << never.error().message;
  StopCondition stop;
  stop.max_tokens = 60;
  auto gen = engine_->submit(Request::generate(a, {a}, random_tokens(8), SamplingParams::greedy(), stop));
  ASSERT_FALSE(gen.ok()) << "8 + 60 tokens are 5 pages";
  EXPECT_EQ(gen.error().code, Errc::out_of_memory);

  ASSERT_TRUE(engine_->submit(forward(b, random_tokens(40))).ok());  // 3 of the 4 pages
  run_until_idle();
  ASSERT_TRUE(engine_->submit(forward(a, random_tokens(40))).ok());  // fits alone, not now
  FinishReason reason = FinishReason::completed;
  std::string error;
  for (const Event& e : run_until_idle())
    if (e.type == Event::Type::finished) {
      reason = e.reason;
      error = e.error;
    }
  EXPECT_EQ(reason, FinishReason::context_full);
  EXPECT_NE(error.find("KV cache full"), std::string::npos) << error;
}

}  // namespace
}  // namespace chorus
