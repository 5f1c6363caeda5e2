// The room gate (actors/memory/room_gate.h) on plain numbers: a pool of 64 pages (16 positions
// each), blocks described by a snapshot. Table-driven where the rule is a formula.
#include <gtest/gtest.h>

#include "actors/memory/room_gate.h"

namespace chorus {
namespace {

PoolSnapshot pool(int64_t free, std::map<BlockId, BlockStat> blocks) {
  PoolSnapshot p;
  p.pool_pages = 64;
  p.free_pages = free;
  p.blocks = std::move(blocks);
  return p;
}

Request generate(BlockId b, int prefill, int max_tokens) {
  StopCondition stop;
  stop.max_tokens = max_tokens;
  return Request::generate(b, {b}, std::vector<TokenId>(static_cast<size_t>(prefill), 1),
                           SamplingParams::greedy(), stop);
}

// Pages a request needs to start and what it wants, for a block of `tokens` holding `pages`.
TEST(RoomGate, GateAndGrowthPagesFollowTheBlockLength) {
  struct Case {
    int64_t tokens, pages;  // the block now
    int prefill, max_tokens;
    int64_t gate, growth;
  };
  const Case cases[] = {
      {0, 0, 10, 20, 2, 2},   // 30 tokens: 2 pages, none held
      {16, 1, 0, 16, 1, 1},   // 16 -> 32 tokens: one more page
      {20, 2, 5, 0, 0, 0},    // 20 -> 25 tokens: within the 2 pages held
      {100, 7, 1, 60, 4, 4},  // 161 tokens: 11 pages, 7 held (100 tokens need 7 too)
      {100, 9, 1, 60, 2, 4},  // the same with 9 pages held (a shared extent): 2 beyond them
      {0, 0, 0, 1, 1, 1},     // one token
  };
  for (const Case& c : cases) {
    RoomGate g;
    const PoolSnapshot p = pool(64 - c.pages, {{1, BlockStat{c.pages, c.tokens, c.tokens}}});
    const Request r = generate(1, c.prefill, c.max_tokens);
    EXPECT_EQ(g.gate_pages(r, p), c.gate) << c.tokens << " tokens + " << c.prefill << " + " << c.max_tokens;
    EXPECT_EQ(g.growth_pages(r, p), c.growth)
        << c.tokens << " tokens + " << c.prefill << " + " << c.max_tokens;
  }
}

// A running reserved request keeps its room: the next request of the same block counts from
// where the first may take it, and the pool's room is the free pages less what is kept.
TEST(RoomGate, ReservedWritersKeepTheirRoomUntilTheLastOneEnds) {
  RoomGate g;
  PoolSnapshot p = pool(60, {{1, BlockStat{1, 10, 10}}, {2, BlockStat{3, 40, 40}}});
  const Request a = generate(1, 6, 30);  // 10 -> 46 tokens: 3 pages, 2 beyond the one held
  EXPECT_EQ(g.room(p), 60);
  const int64_t end_a = g.end_after(a, p);
  EXPECT_EQ(end_a, 46);
  g.reserve(7, a, /*program=*/5, end_a);
  EXPECT_EQ(g.outstanding(1, p), 2);
  EXPECT_EQ(g.room(p), 58);
  // A second writer of block 1 starts from 46: 46 -> 66 tokens is 5 pages, 2 beyond those kept.
  const Request b = generate(1, 0, 20);
  EXPECT_EQ(g.gate_pages(b, p), 2);
  const int64_t end_b = g.end_after(b, p);
  EXPECT_EQ(end_b, 66);
  g.reserve(8, b, 5, end_b);
  EXPECT_EQ(g.outstanding(1, p), 4);
  EXPECT_EQ(g.room(p), 56);
  // A probe's scratch block is kept apart.
  const Request probe = Request::probe({2}, std::vector<TokenId>(20, 1), {{1}, {2, 3}});
  EXPECT_EQ(RoomGate::probe_pages(probe), 2);
  g.reserve(9, probe, 6, g.end_after(probe, p));
  EXPECT_EQ(g.room(p), 54);
  EXPECT_EQ(g.kept_for(5, std::vector<BlockId>{1}, p), 4);
  EXPECT_EQ(g.kept_for(6, std::vector<BlockId>{}, p), 2);
  // The block grows as its writers run: what it holds is no longer outstanding.
  p.blocks[1] = BlockStat{4, 60, 60};
  p.free_pages = 57;
  EXPECT_EQ(g.outstanding(1, p), 1);
  // The first writer ends: the block's room stays while the second runs; then it goes.
  EXPECT_TRUE(g.release(7));
  EXPECT_EQ(g.outstanding(1, p), 1);
  EXPECT_TRUE(g.release(8));
  EXPECT_EQ(g.outstanding(1, p), 0);
  EXPECT_FALSE(g.release(8)) << "released twice";
  EXPECT_TRUE(g.release(9));
  EXPECT_TRUE(g.empty());
  EXPECT_EQ(g.room(p), 57);
}

TEST(RoomGate, ARequestLargerThanThePoolBesideItsProgramNeverFits) {
  RoomGate g;
  const PoolSnapshot p = pool(10, {{1, BlockStat{20, 300, 300}}, {2, BlockStat{30, 480, 480}}});
  // Block 1 of a program that also holds block 2 (50 pages): 14 more pages fit 64, 15 do not.
  const std::vector<BlockId> program = {1, 2};
  EXPECT_FALSE(g.never_fits(generate(1, 0, 244), program, p).has_value());  // 544 tokens: 34 pages, 14 more
  auto never = g.never_fits(generate(1, 0, 260), program, p);               // 560 tokens: 35 pages, 15 more
  ASSERT_TRUE(never.has_value());
  EXPECT_EQ(never->code, Errc::out_of_memory);
  EXPECT_NE(never->message.find("may write 15 pages and its program holds 50; the pool has 64"),
            std::string::npos)
      << never->message;
  // Appends compute nothing: they need no room.
  EXPECT_EQ(g.gate_pages(Request::append(1, std::vector<TokenId>(1000, 1)), p), 0);
}

// Hybrid models with counted slots: a request needs a slot for a block that holds none (unless
// a reserved writer of the block keeps one already), a probe one for its scratch block; the
// slots kept for reserved requests whose blocks have not taken theirs are not room.
TEST(RoomGate, SlotsAreGatedAndKeptLikePages) {
  RoomGate g;
  PoolSnapshot p = pool(60, {{1, BlockStat{1, 10, 10}}, {2, BlockStat{}}});
  p.blocks[1].slot = true;
  p.pool_slots = 3;
  p.free_slots = 2;
  const Request a = generate(1, 1, 4), b = generate(2, 1, 4);
  const Request probe = Request::probe({1}, {1}, {{1}});
  EXPECT_EQ(g.gate_slots(a, p), 0) << "block 1 holds its slot";
  EXPECT_EQ(g.gate_slots(b, p), 1);
  EXPECT_EQ(g.gate_slots(probe, p), 1);
  EXPECT_EQ(g.gate_slots(Request::append(2, {1}), p), 0);
  EXPECT_EQ(g.slot_room(p), 2);
  g.reserve(7, b, /*program=*/5, g.end_after(b, p), /*slot=*/true);
  EXPECT_EQ(g.slot_room(p), 1) << "one kept for block 2";
  EXPECT_EQ(g.gate_slots(generate(2, 1, 4), p), 0) << "the reserved writer's slot serves the next writer";
  EXPECT_EQ(g.slots_kept_for(5, std::vector<BlockId>{2}, p), 1);
  g.reserve(8, probe, 5, 0, true);
  EXPECT_EQ(g.slot_room(p), 0);
  // Block 2 takes its slot: no longer kept, it is counted in the pool's use.
  p.blocks[2].slot = true;
  p.free_slots = 0;  // block 2's and the probe's scratch block's
  // The probe's scratch slot stays kept until it ends, even once taken (as its pages are: the
  // count errs on the safe side).
  EXPECT_EQ(g.slot_room(p), -1);
  EXPECT_TRUE(g.release(8));
  EXPECT_TRUE(g.release(7));
  EXPECT_EQ(g.slot_room(p), 0);
  // Without counted slots nothing is gated.
  PoolSnapshot q = pool(60, {{2, BlockStat{}}});
  EXPECT_EQ(g.gate_slots(b, q), 0);
  EXPECT_EQ(g.slot_room(q), 0);
}

// A request whose program holds every slot could never start: refused, naming the option.
TEST(RoomGate, ARequestNeedingMoreSlotsThanTheNodeHasNeverFits) {
  RoomGate g;
  PoolSnapshot p = pool(60, {{1, BlockStat{1, 10, 10}}, {2, BlockStat{1, 10, 10}}, {3, BlockStat{}}});
  p.blocks[1].slot = p.blocks[2].slot = true;
  p.pool_slots = 2;
  p.free_slots = 0;
  const std::vector<BlockId> program = {1, 2, 3};
  auto never = g.never_fits(generate(3, 1, 4), program, p);
  ASSERT_TRUE(never.has_value());
  EXPECT_EQ(never->code, Errc::out_of_memory);
  EXPECT_NE(never->message.find("--linear-slots"), std::string::npos) << never->message;
  EXPECT_FALSE(g.never_fits(generate(1, 1, 4), program, p).has_value()) << "block 1 has its slot";
  EXPECT_FALSE(g.never_fits(generate(3, 1, 4), std::vector<BlockId>{3}, p).has_value())
      << "others' slots can be freed by pausing them";
}

}  // namespace
}  // namespace chorus
