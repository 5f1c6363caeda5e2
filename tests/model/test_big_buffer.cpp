// base/big_buffer.h: the memory the weight panels live in.
#include "base/big_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

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

// Whether the mapping holding p carries the kernel's huge-page advice ("hg" in its VmFlags).
bool advised_huge(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return (line + " ").find(" hg ") != std::string::npos;
    }
  }
  return false;
}

TEST(BigBuffer, AsksForHugePagesUnlessTheEnvironmentSaysNot) {
  constexpr size_t kBytes = size_t{4} << 20;
  BigBuffer advised = allocate_big(kBytes);
  ASSERT_NE(advised, nullptr);
  if (!advised_huge(advised.get())) GTEST_SKIP() << "this kernel takes no MADV_HUGEPAGE";
  ::setenv("CHORUS_HUGE_PAGES", "0", 1);
  BigBuffer plain = allocate_big(kBytes);
  ::unsetenv("CHORUS_HUGE_PAGES");
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(advised_huge(plain.get()));
  EXPECT_TRUE(advised_huge(advised.get()));
}

TEST(BigBuffer, NothingAskedIsNoBuffer) {
  EXPECT_EQ(allocate_big(0), nullptr);
}

}  // namespace
}  // namespace chorus
