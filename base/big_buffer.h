// Large buffers that are read whole and often (the repacked weight panels: every decode step
// streams all of them) on transparent huge pages where the kernel offers them: 2 MiB-aligned
// anonymous memory with MADV_HUGEPAGE, so that streaming hundreds of megabytes does not miss the
// TLB every 4 KiB (the kernel's default "madvise" mode gives huge pages only to memory that asks).
// Not for memory used sparsely: a huge page is zeroed and resident whole at its first touch. The
// KV cache's pool is such memory (its pages are spread over every layer's region), and measured
// no faster on huge pages (docs/performance.md). Where huge pages are off, or the environment has
// CHORUS_HUGE_PAGES=0, it is ordinary memory.
#pragma once

#include <cstddef>
#include <memory>

namespace chorus {

struct BigBufferFree {
  size_t bytes = 0;  // the mapping's length
  void operator()(std::byte* p) const;
};
using BigBuffer = std::unique_ptr<std::byte[], BigBufferFree>;

// nullptr when the system refuses the memory (bytes 0 gives an empty buffer, also nullptr).
BigBuffer allocate_big(size_t bytes);

}  // namespace chorus
