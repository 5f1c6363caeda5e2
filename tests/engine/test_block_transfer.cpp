// Moving a block to another engine by its KV (Engine::export_block / load_block, the KV-transfer
// migration of docs/cluster.md): the block continues there exactly as where it was written, and
// what cannot travel alone is refused with its reason.
#include <gtest/gtest.h>

#include <random>

#include "device/cpu_device.h"
#include "engine/step/engine.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

class BlockTransfer : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(load("tiny_llama_f32.gguf")); }
  void load(const std::string& file) {
    ASSERT_NO_FATAL_FAILURE(test::load_model(test::goldens_dir() + "/" + file, &model_, &device_));
    for (auto* e : {&a_, &b_}) {
      auto made = Engine::create(*model_, *device_, {.n_pages = 128, .token_budget = 32});
      ASSERT_TRUE(made.ok()) << made.error().to_string();
      *e = std::move(*made);
    }
  }
  std::vector<TokenId> toks(int n) {
    std::uniform_int_distribution<int> d(0, model_->config.n_vocab - 3);
    std::vector<TokenId> v(static_cast<size_t>(n));
    for (auto& t : v) t = d(rng_);
    return v;
  }
  static void run(Engine& e) {
    for (int i = 0; i < 1000 && !e.idle(); ++i) ASSERT_TRUE(e.step().ok());
    ASSERT_TRUE(e.idle());
  }
  // Greedy tokens generated into `block` (seeing only it) after `prefill`.
  static std::vector<TokenId> generate(Engine& e, BlockId block, std::vector<TokenId> prefill, int n) {
    StopCondition stop;
    stop.max_tokens = n;
    stop.at_end_of_generation = false;
    auto id = e.submit(Request::generate(block, {block}, std::move(prefill), SamplingParams::greedy(), stop));
    EXPECT_TRUE(id.ok()) << id.error().to_string();
    std::vector<TokenId> out;
    for (int i = 0; i < 1000 && !e.idle(); ++i) {
      auto events = e.step();
      EXPECT_TRUE(events.ok());
      for (const Event& ev : *events)
        if (ev.type == Event::Type::token) out.push_back(ev.token);
    }
    return out;
  }
  static std::vector<float> probe(Engine& e, BlockId block) {
    auto id = e.submit(Request::probe({block}, {7, 8, 9}, {{1}, {2}, {3}, {4, 5}}));
    EXPECT_TRUE(id.ok()) << id.error().to_string();
    std::vector<float> p;
    for (int i = 0; i < 100 && !e.idle(); ++i)
      for (const Event& ev : *e.step())
        if (ev.type == Event::Type::probe_result) p = ev.probabilities;
    return p;
  }
  // A conversation block on engine a: a prompt, then a generated reply.
  BlockId conversation() {
    const BlockId c = a_->blocks().create("conversation");
    EXPECT_TRUE(a_->submit(Request::forward(c, toks(45), {c})).ok());
    run(*a_);
    generate(*a_, c, {3}, 10);
    return c;
  }
  // An empty block on engine b, paused (as a program's new block is) and ready to load.
  BlockId empty_paused(Engine& e) {
    const BlockId id = e.blocks().create("moved");
    const BlockId ids[] = {id};
    EXPECT_TRUE(e.pause(ids, PauseMode::drop).ok());
    return id;
  }

  std::mt19937 rng_{7};
  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<Engine> a_, b_;
};

TEST_F(BlockTransfer, AMovedBlockContinuesExactlyAsWhereItWasWritten) {
  const BlockId c = conversation();
  // Two tokens appended to its log, not computed yet: they travel in the log, without KV.
  ASSERT_TRUE(a_->submit(Request::append(c, {11, 12})).ok());
  run(*a_);
  auto image = a_->export_block(c);
  ASSERT_TRUE(image.ok()) << image.error().to_string();
  EXPECT_EQ(image->tokens, (*a_->blocks().get(c))->tokens);
  EXPECT_EQ(image->tokens.size(), 58u);  // 45 + the prefill token + 10 generated + 2 appended
  EXPECT_EQ(image->cached, 56);
  EXPECT_EQ(image->kv.size(), 4 * a_->blocks().kv().page_bytes());

  const BlockId m = empty_paused(*b_);
  ASSERT_TRUE(b_->load_block(m, *image).ok());
  EXPECT_EQ((*b_->blocks().get(m))->tokens, image->tokens);
  EXPECT_TRUE((*b_->blocks().get(m))->paused) << "loaded as a paused block's host copy";
  const BlockId ms[] = {m};
  ASSERT_TRUE(b_->restore(ms).ok());

  // The same next tokens, and the same probabilities to the bit: the KV is the same bytes.
  EXPECT_EQ(probe(*b_, m), probe(*a_, c));
  EXPECT_EQ(generate(*b_, m, {5}, 16), generate(*a_, c, {5}, 16));
  EXPECT_EQ((*b_->blocks().get(m))->tokens, (*a_->blocks().get(c))->tokens);
}

TEST_F(BlockTransfer, AnOffloadedBlockExportsTheSameBytesAsAResidentOne) {
  const BlockId c = conversation();
  auto resident = a_->export_block(c);
  ASSERT_TRUE(resident.ok());
  const BlockId cs[] = {c};
  ASSERT_TRUE(a_->pause(cs, PauseMode::offload).ok());
  auto offloaded = a_->export_block(c);
  ASSERT_TRUE(offloaded.ok()) << offloaded.error().to_string();
  EXPECT_EQ(offloaded->tokens, resident->tokens);
  EXPECT_TRUE(offloaded->kv == resident->kv);
}

// A loaded block paused by drop later is rebuilt from its log as one run seeing nothing else —
// how it was computed where it came from.
TEST_F(BlockTransfer, ALoadedBlockDroppedLaterIsRebuiltFromItsLog) {
  const BlockId c = conversation();
  const BlockId m = empty_paused(*b_);
  ASSERT_TRUE(b_->load_block(m, *a_->export_block(c)).ok());
  const BlockId ms[] = {m};
  ASSERT_TRUE(b_->restore(ms).ok());
  const auto before = probe(*b_, m);
  ASSERT_TRUE(b_->pause(ms, PauseMode::drop).ok());
  ASSERT_TRUE(b_->restore(ms).ok());
  const auto after = probe(*b_, m);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_NEAR(after[i], before[i], 1e-4f * std::max(before[i], 1e-3f));
}

TEST_F(BlockTransfer, WhatCannotTravelAloneIsRefusedWithItsReason) {
  const BlockId c = conversation();
  auto expect_refused = [](const Result<BlockImage>& r, Errc code, const std::string& why) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, code);
    EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
  };
  // Written seeing another block: its KV depends on that block.
  const BlockId reader = a_->blocks().create("reader");
  ASSERT_TRUE(a_->submit(Request::forward(reader, toks(5), {c, reader})).ok());
  run(*a_);
  expect_refused(a_->export_block(reader), Errc::unsupported, "written seeing block");
  // Merged: pages shared.
  auto merged = a_->blocks().merge(c, reader);
  ASSERT_TRUE(merged.ok());
  expect_refused(a_->export_block(*merged), Errc::unsupported, "merge/fork");
  ASSERT_TRUE(a_->blocks().free(*merged).ok());
  // Used by a pending request.
  ASSERT_TRUE(a_->submit(Request::forward(c, toks(3), {c})).ok());
  expect_refused(a_->export_block(c), Errc::invalid_argument, "pending request");
  run(*a_);
  // Dropped by a pause: no KV to carry (the caller recomputes).
  const BlockId cs[] = {c};
  ASSERT_TRUE(a_->pause(cs, PauseMode::drop).ok());
  expect_refused(a_->export_block(c), Errc::unsupported, "dropped");
  ASSERT_TRUE(a_->restore(cs).ok());

  auto image = a_->export_block(c);
  ASSERT_TRUE(image.ok());
  auto refused_load = [&](BlockImage im, BlockId into, const std::string& why) {
    const Status s = b_->load_block(into, std::move(im));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, Errc::invalid_argument);
    EXPECT_NE(s.error().message.find(why), std::string::npos) << s.error().message;
  };
  const BlockId m = empty_paused(*b_);
  BlockImage other = *image;
  other.format = "f32/L99/D64";
  refused_load(other, m, "its pages are f32/L99/D64");
  BlockImage short_kv = *image;
  short_kv.kv.resize(short_kv.kv.size() - 1);
  refused_load(short_kv, m, "bytes of pages");
  BlockImage past_log = *image;
  past_log.cached = static_cast<int64_t>(past_log.tokens.size()) + 1;
  refused_load(past_log, m, "cached positions in a log of");
  BlockImage bad_token = *image;
  bad_token.tokens[3] = model_->config.n_vocab;
  refused_load(bad_token, m, "outside the vocabulary");
  refused_load(*image, b_->blocks().create("resident"), "only a paused block");
  EXPECT_TRUE((*b_->blocks().get(m))->tokens.empty()) << "a refused load changes nothing";
  ASSERT_TRUE(b_->load_block(m, *image).ok());
  refused_load(*image, m, "only a paused block");  // loaded once already
}

TEST_F(BlockTransfer, AHybridModelsLinearStateDoesNotTravel) {
  ASSERT_NO_FATAL_FAILURE(load("tiny_qwen35.gguf"));
  const BlockId c = a_->blocks().create("c");
  ASSERT_TRUE(a_->submit(Request::forward(c, toks(20), {c})).ok());
  run(*a_);
  auto r = a_->export_block(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unsupported);
  EXPECT_NE(r.error().message.find("linear state"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace chorus
