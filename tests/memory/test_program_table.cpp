// The program table (actors/memory/program_table.h) on plain numbers.
#include <gtest/gtest.h>

#include "actors/memory/program_table.h"

namespace chorus {
namespace {

TEST(ProgramTable, HoldOwnersHoldingsAndRestorePages) {
  ProgramTable t;
  t.add(1, {"held", {10, 11}, ProgramState::active, true});
  t.add(2, {"plain", {12}, ProgramState::active, false});
  PoolSnapshot pool;
  pool.pool_pages = 64;
  pool.blocks[10] = BlockStat{2, 30, 30, 1};
  pool.blocks[11] = BlockStat{0, 50, 0, 0, true, 50};  // paused: a restore rebuilds 50 positions
  pool.blocks[12] = BlockStat{1, 5, 5};

  const std::vector<BlockId> view = {12, 11};
  EXPECT_EQ(t.hold_owner(view, false), 1u) << "block 11 is program 1's, registered with hold";
  EXPECT_EQ(t.hold_owner(view, true), 0u) << "program 1 is not paused";
  t.find(1)->state = ProgramState::paused;
  EXPECT_EQ(t.hold_owner(view, true), 1u);
  EXPECT_EQ(t.hold_owner(std::vector<BlockId>{12}, false), 0u) << "program 2 was registered without hold";

  const ProgramTable::Holdings h = t.holdings(1, pool);
  EXPECT_EQ(h.pages, 2);
  EXPECT_EQ(h.tokens, 80);
  EXPECT_EQ(h.pending, 1);
  EXPECT_EQ(t.restore_pages(1, pool), 4);  // 50 positions: 4 pages
  EXPECT_EQ(t.restore_pages(2, pool), 0);

  t.forget_block(11);
  EXPECT_EQ(t.find(1)->blocks, std::vector<BlockId>{10});
  t.erase(2);
  EXPECT_EQ(t.find(2), nullptr);
  EXPECT_EQ(t.all().size(), 1u);
}

}  // namespace
}  // namespace chorus
