// The CUDA runner's host-side step planning (engine/forward/cuda/cuda_step_plan.h), on the CPU: the tables a
// step's kernels read — page lists and segments, prefill tiles, the rows whose logits are
// computed, device draws — and the padding of graphed steps onto the spare page; and where a
// hybrid block's new tokens go in its device slot (engine/forward/cuda/cuda_linear.h plan_linear_append), and
// where a chain read's convolution inputs come from (kernels/cuda/gdn_chain_walk.h).
#include <gtest/gtest.h>

#include <deque>
#include <optional>
#include <random>
#include <vector>

#include "engine/forward/cuda/cuda_linear.h"
#include "engine/forward/cuda/cuda_step_plan.h"
#include "kernels/cuda/gdn_chain_walk.h"

namespace chorus {
namespace {

SequenceKv seq(std::vector<int32_t> pages, int64_t n_tokens) {
  SequenceKv s;
  s.pages = std::move(pages);
  s.n_tokens = n_tokens;
  return s;
}

constexpr CudaStepLimits kLimits{
    .n_pages = 64, .page_table = 200, .graphs = true, .graph_max_tokens = 64, .max_tokens = 128};

// A 70-token prefill of block 1 through the view [ctx, own], then one decode token of block 2:
// 71 tokens, too many for a graph.
struct Prefill {
  SequenceKv ctx = seq({5, 9, 2}, 40), own = seq({10, 11, 12, 13, 14}, 0), other = seq({20, 21}, 20);
  std::vector<SequenceKv*> seqs{&ctx, &own, &other};
  std::vector<View> views{{0, 1}};
  std::vector<BatchToken> batch;
  Prefill() {
    for (int p = 0; p < 70; ++p) batch.push_back({3, p, 1, p == 69, 0});
    batch.push_back({4, 20, 2, true, -1});
  }
};

TEST(CudaStepPlan, PrefillAttendsInTilesAndProjectsOnlyTheAskedRows) {
  Prefill f;
  auto p = plan_cuda_step(f.batch, f.seqs, f.views, {}, false, kLimits);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_FALSE(p->graphed);
  EXPECT_EQ(p->n_run, 71);
  ASSERT_EQ(p->tiles.size(), 3u);
  const int32_t want_tiles[3][2] = {{0, 32}, {32, 32}, {64, 6}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(p->tiles[i].first_token, want_tiles[i][0]) << i;
    EXPECT_EQ(p->tiles[i].n_tokens, want_tiles[i][1]) << i;
  }
  // The decode token goes to the per-token kernel, compacted: its row and its own entry.
  EXPECT_EQ(p->single_tokens, (std::vector<int32_t>{70}));
  ASSERT_EQ(p->single_table.size(), 1u);
  EXPECT_EQ(p->single_table[0].first_seg, p->tokens[70].first_seg);
  EXPECT_EQ(p->single_table[0].n_segs, 1);
  EXPECT_EQ(p->logit_tokens, (std::vector<int32_t>{69, 70}));
  EXPECT_EQ(p->n_logits_rows(), 2);
  EXPECT_EQ(p->logits_row(70, 1), 1);
  // Pages as far as read: the context's 3, the own block's 5 (70 positions), the other's 2.
  EXPECT_EQ(p->page_ids, (std::vector<int32_t>{5, 9, 2, 10, 11, 12, 13, 14, 20, 21}));
  // Token 69 sees the context (40 positions, rotated by its view position 40 + 69) and its own
  // block up to itself (70 positions, rotated by 69).
  const cuda::AttnToken t69 = p->tokens[69];
  ASSERT_EQ(t69.n_segs, 2);
  const cuda::AttnSegment a = p->segs[static_cast<size_t>(t69.first_seg)],
                          b = p->segs[static_cast<size_t>(t69.first_seg + 1)];
  EXPECT_EQ(a.first_page, 0);
  EXPECT_EQ(a.n_kv, 40);
  EXPECT_EQ(a.q_pos, 109);
  EXPECT_EQ(b.first_page, 3);
  EXPECT_EQ(b.n_kv, 70);
  EXPECT_EQ(b.q_pos, 69);
  EXPECT_EQ(p->write_page[69], 14);  // position 69: page 4 of the own block
  EXPECT_EQ(p->write_slot[69], 5);
  EXPECT_EQ(p->write_page[70], 21);  // the decode token, position 20 of block 2
}

TEST(CudaStepPlan, GraphedStepsArePaddedOntoTheSparePage) {
  SequenceKv a = seq({1}, 5), b = seq({2}, 7), c = seq({3}, 2);
  std::vector<SequenceKv*> seqs{&a, &b, &c};
  std::vector<BatchToken> batch = {{1, 5, 0, true, -1}, {1, 7, 1, true, -1}, {1, 2, 2, true, -1}};
  auto p = plan_cuda_step(batch, seqs, {}, {}, false, kLimits);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_TRUE(p->graphed);
  EXPECT_EQ(p->n_run, 4);
  EXPECT_TRUE(p->tiles.empty());
  EXPECT_EQ(p->n_logits_rows(), 4) << "a graph computes every row";
  EXPECT_EQ(p->logits_row(2, 2), 2);
  ASSERT_EQ(p->ids.size(), 4u);
  EXPECT_EQ(p->write_page[3], kLimits.n_pages) << "the padding token writes the spare page";
  EXPECT_EQ(p->page_ids.back(), kLimits.n_pages);
  const cuda::AttnSegment pad = p->segs[static_cast<size_t>(p->tokens[3].first_seg)];
  EXPECT_EQ(pad.first_page, static_cast<int32_t>(p->page_ids.size() - 1)) << "and reads only it";
  EXPECT_EQ(pad.n_kv, 1);
  // Graphs off: the same step runs as it is.
  CudaStepLimits off = kLimits;
  off.graphs = false;
  auto q = plan_cuda_step(batch, seqs, {}, {}, false, off);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->graphed);
  EXPECT_EQ(q->n_run, 3);
  EXPECT_TRUE(q->tiles.empty());
  EXPECT_EQ(q->single_tokens, (std::vector<int32_t>{0, 1, 2}));
}

TEST(CudaStepPlan, DrawsReadTheirLogitsRows) {
  PlannedDraw d;
  d.temperature = 0.7f;
  d.top_k = 40;
  d.u = 0.25;
  // Not graphed: the draw for the second logits row (the decode token, token 70) reads row 1.
  Prefill f;
  const std::vector<std::optional<PlannedDraw>> draws = {std::nullopt, d};
  auto p = plan_cuda_step(f.batch, f.seqs, f.views, draws, true, kLimits);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  ASSERT_EQ(p->samples.size(), 1u);
  EXPECT_EQ(p->samples[0].row, 1);
  EXPECT_EQ(p->sample_out, (std::vector<int64_t>{1}));
  EXPECT_EQ(p->samples[0].top_k, 40);
  EXPECT_EQ(p->samples[0].u, 0.25);
  // Graphed: row = the token.
  SequenceKv a = seq({1}, 5), b = seq({2}, 7);
  std::vector<SequenceKv*> seqs{&a, &b};
  std::vector<BatchToken> batch = {{1, 5, 0, false, -1}, {1, 7, 1, true, -1}};
  const std::vector<std::optional<PlannedDraw>> one = {d};
  auto g = plan_cuda_step(batch, seqs, {}, one, true, kLimits);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_EQ(g->samples[0].row, 1);
  EXPECT_EQ(g->sample_out, (std::vector<int64_t>{0}));
  // Refusals.
  auto e = plan_cuda_step(batch, seqs, {}, one, false, kLimits);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("without tokens_out"), std::string::npos);
  PlannedDraw wide = d;
  wide.top_k = 300;
  e = plan_cuda_step(batch, seqs, {}, std::vector<std::optional<PlannedDraw>>{wide}, true, kLimits);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("top_k 300"), std::string::npos);
  e = plan_cuda_step(batch, seqs, {}, std::vector<std::optional<PlannedDraw>>{d, d}, true, kLimits);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("2 draws for 1 logits rows"), std::string::npos);
}

TEST(CudaStepPlan, PagesOutsideTheRunnerOrTheTableAreErrors) {
  SequenceKv a = seq({1, 64}, 20);
  std::vector<SequenceKv*> seqs{&a};
  std::vector<BatchToken> batch = {{1, 20, 0, true, -1}};
  auto e = plan_cuda_step(batch, seqs, {}, {}, false, kLimits);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("page 64 is outside the CUDA runner's 64 pages"), std::string::npos);
  a.pages = {1, 2};
  CudaStepLimits small = kLimits;
  small.page_table = 2;
  e = plan_cuda_step(batch, seqs, {}, {}, false, small);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, Errc::out_of_range);
}

// A block's tokens through many steps of random sizes, each placed by plan_linear_append, against
// a model of the slot: head positions, the summary (body tokens in order, folded before a step
// or inside it) and the buffer (body tokens in order, at most dk). Every body token ends up in
// exactly one place, in order; the counts the next step starts from agree; a step folds inside
// its layers (and so cannot be a graph) only when it brings more than dk body tokens.
TEST(LinearAppend, EveryTokenLandsOnceInOrderThroughRandomSteps) {
  for (const auto& [keep, dk] : {std::pair{3, 16}, std::pair{3, 128}, std::pair{1, 32}}) {
    std::mt19937 rng(static_cast<uint32_t>(keep * 1000 + dk));
    for (int trial = 0; trial < 200; ++trial) {
      int64_t start = 0, dense = 0;
      std::vector<int64_t> head, summary;
      std::deque<int64_t> buffer;
      for (int step = 0; step < 40; ++step) {
        const int64_t n = rng() % 5 == 0 ? 1 + rng() % (3 * dk) : 1 + rng() % 4;  // prefills among decodes
        auto plan = plan_linear_append(start, n, dense, keep, dk);
        ASSERT_TRUE(plan.ok()) << plan.error().message;
        const LinearAppend& a = *plan;
        ASSERT_EQ(a.head, std::max<int64_t>(0, std::min<int64_t>(start + n, keep) - start));
        for (int64_t i = 0; i < a.head; ++i) head.push_back(start + i);
        if (a.prefold > 0) {
          ASSERT_EQ(a.prefold, static_cast<int64_t>(buffer.size()));
        }
        ASSERT_EQ(a.prefold > 0, !buffer.empty() && static_cast<int64_t>(buffer.size()) + n - a.head > dk);
        for (; a.prefold > 0 && !buffer.empty(); buffer.pop_front()) summary.push_back(buffer.front());
        ASSERT_EQ(a.dense_before, static_cast<int64_t>(summary.size()));
        const int64_t body0 = start + a.head;  // position of the step's first body token
        ASSERT_EQ(a.folded % dk, 0);
        ASSERT_EQ(a.folded > 0, n - a.head > dk);
        for (int64_t i = 0; i < a.folded; ++i) summary.push_back(body0 + i);
        ASSERT_EQ(a.buffer_at, static_cast<int64_t>(buffer.size()));
        for (int64_t i = a.folded; i < n - a.head; ++i) buffer.push_back(body0 + i);
        ASSERT_LE(static_cast<int64_t>(buffer.size()), dk);
        ASSERT_EQ(a.dense_after, static_cast<int64_t>(summary.size()));
        start += n;
        dense = a.dense_after;
        // The summary then the buffer hold the body, keep.. start-1, in order.
        std::vector<int64_t> body(summary);
        body.insert(body.end(), buffer.begin(), buffer.end());
        for (size_t i = 0; i < body.size(); ++i) ASSERT_EQ(body[i], keep + static_cast<int64_t>(i));
        ASSERT_EQ(static_cast<int64_t>(body.size()), std::max<int64_t>(0, start - keep));
        for (size_t i = 0; i < head.size(); ++i) ASSERT_EQ(head[i], static_cast<int64_t>(i));
      }
    }
  }
  // Counts that disagree are refused, not followed.
  EXPECT_FALSE(plan_linear_append(10, 1, 8, 3, 16).ok());  // more summarised than the body holds
  EXPECT_FALSE(plan_linear_append(40, 1, 0, 3, 16).ok());  // a buffer of 37 > 16
}

// A chain read's convolution windows (kernels/cuda/gdn_chain_walk.h, the rule the device's
// gdn_chain_inputs follows): for random views — a base of nb tokens or none, then blocks of 0..6
// tokens — every tap of every head token, and every row of the tail after the last block, names
// the input at that position of the view's concatenation (or zero before its start), though
// each block keeps only its first and last `keep` inputs and the base only its last.
TEST(GdnChainSource, EveryWindowReadsTheInputBeforeIt) {
  constexpr int64_t kZero = -1;
  for (int keep = 1; keep <= 4; ++keep) {
    std::mt19937 rng(static_cast<uint32_t>(keep));
    for (int trial = 0; trial < 500; ++trial) {
      const int nb = static_cast<int>(rng() % 7);
      const bool has_base = nb > 0;
      std::vector<cuda::GdnChainBlock> blocks(1 + rng() % 5);
      std::vector<int64_t> start;  // each block's first position in the view
      int64_t at = nb;
      for (auto& b : blocks) {
        b.n = static_cast<int32_t>(rng() % 7);
        start.push_back(at);
        at += b.n;
      }
      start.push_back(at);
      // What each kept row holds, as a position in the view (kZero: a row before the view's start).
      auto label = [&](const cuda::GdnChainSource& s, int i) -> int64_t {
        switch (s.from) {
          case cuda::GdnChainSource::head:
            EXPECT_EQ(s.block, i) << "a head row of another block";
            EXPECT_LT(s.row, std::min<int64_t>(blocks[static_cast<size_t>(i)].n, keep));
            return start[static_cast<size_t>(i)] + s.row;
          case cuda::GdnChainSource::tail: {
            const int32_t n = blocks[static_cast<size_t>(s.block)].n;
            EXPECT_GE(s.row, keep - std::min(n, keep)) << "a tail row the block does not hold";
            return start[static_cast<size_t>(s.block)] + n - keep + s.row;
          }
          case cuda::GdnChainSource::base:
            EXPECT_TRUE(has_base);
            return nb - keep + s.row >= 0 ? nb - keep + s.row : kZero;
          default: return kZero;
        }
      };
      const int n_blocks = static_cast<int>(blocks.size());
      for (int i = 0; i <= n_blocks; ++i) {
        const int n_head = i < n_blocks ? std::min(blocks[static_cast<size_t>(i)].n, keep) : 0;
        for (int p = -keep; p < n_head; ++p) {
          const int64_t want =
              start[static_cast<size_t>(i)] + p >= 0 ? start[static_cast<size_t>(i)] + p : kZero;
          ASSERT_EQ(label(cuda::gdn_chain_source(blocks.data(), i, p, keep, has_base), i), want)
              << "keep " << keep << ", trial " << trial << ", block " << i << ", position " << p;
        }
      }
    }
  }
}

}  // namespace
}  // namespace chorus
