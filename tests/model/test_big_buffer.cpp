// base/big_buffer.h: the memory the weight panels live in.
#include "base/big_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace chorus {
namespace {

TEST(BigBuffer, StartsOnAHugePageBoundaryZeroedAndWritable) {
  constexpr size_t kBytes = (size_t{5} << 20) + 123;  // not a whole number of huge pages
  BigBuffer b = allocate_big(kBytes);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % (size_t{2} << 20), 0u);
  EXPECT_TRUE(std::all_of(b.get(), b.get() + kBytes, [](std::byte x) { return x == std::byte{0}; }));
  std::fill(b.get(), b.get() + kBytes, std::byte{0x5a});
  EXPECT_EQ(b[kBytes - 1], std::byte{0x5a});
  b.reset();  // unmapped whole: a second one maps again
  EXPECT_NE(allocate_big(kBytes), nullptr);
}

TEST(BigBuffer, NothingAskedIsNoBuffer) {
  EXPECT_EQ(allocate_big(0), nullptr);
}

}  // namespace
}  // namespace chorus
