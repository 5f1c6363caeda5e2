#include "base/big_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace chorus {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

void BigBufferFree::operator()(std::byte* p) const {
  if (p != nullptr) ::munmap(p, bytes);
}

BigBuffer allocate_big(size_t bytes) {
  if (bytes == 0) return BigBuffer(nullptr, BigBufferFree{0});
  // Map a huge page more than asked, then give back the ends so that the buffer starts on a
  // huge-page boundary (mmap only promises 4 KiB alignment).
  const size_t length = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* raw = ::mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return BigBuffer(nullptr, BigBufferFree{0});
  auto* base = static_cast<std::byte*>(raw);
  const auto at = reinterpret_cast<uintptr_t>(base);
  std::byte* start = base + ((kHugePage - at % kHugePage) % kHugePage);
  if (start > base) ::munmap(base, static_cast<size_t>(start - base));
  std::byte* end = start + length;
  if (base + length + kHugePage > end) ::munmap(end, static_cast<size_t>(base + length + kHugePage - end));
#if defined(MADV_HUGEPAGE)
  // Advice: ignored where huge pages are off. CHORUS_HUGE_PAGES=0 leaves them out.
  const char* e = std::getenv("CHORUS_HUGE_PAGES");
  if (e == nullptr || std::string_view(e) != "0") ::madvise(start, length, MADV_HUGEPAGE);
#endif
  return BigBuffer(start, BigBufferFree{length});
}

}  // namespace chorus
