// What this machine's memory gives, for the bounds in docs/performance.md: the read bandwidth of
// two threads streaming a 1 GiB buffer 4 times with 512-bit loads (the most a decode step that
// reads every weight once can draw), and the time to first touch 1 GiB on ordinary pages and on
// huge pages (MADV_HUGEPAGE; the first huge pages after boot come slowly on a VM). Build and run:
//   g++ -O2 -mavx512f -pthread tools/bench/memory_peak.cpp -o /tmp/memory_peak && /tmp/memory_peak
#include <immintrin.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr size_t kBytes = size_t{1} << 30;
constexpr size_t kHuge = size_t{2} << 20;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// kBytes of anonymous memory on a 2 MiB boundary (the mapping is kept: the process ends soon).
char* map_aligned(bool huge) {
  void* raw = mmap(nullptr, kBytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) / kHuge * kHuge);
  if (huge) madvise(p, kBytes, MADV_HUGEPAGE);
  return p;
}

double first_touch(bool huge) {
  char* p = map_aligned(huge);
  if (p == nullptr) return -1;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kBytes; i += 4096) p[i] = 1;
  return seconds_since(t0);
}

double read_bandwidth(int threads) {
  char* p = map_aligned(true);
  if (p == nullptr) return -1;
  std::memset(p, 1, kBytes);
  std::vector<long long> sums(static_cast<size_t>(threads));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      __m512i acc = _mm512_setzero_si512();
      const size_t lo = kBytes / threads * t, hi = kBytes / threads * (t + 1);
      for (int r = 0; r < 4; ++r)
        for (size_t i = lo; i < hi; i += 64) acc = _mm512_add_epi64(acc, _mm512_load_si512(p + i));
      sums[static_cast<size_t>(t)] = _mm512_reduce_add_epi64(acc);
    });
  for (auto& t : ts) t.join();
  const double s = seconds_since(t0);
  long long check = 0;
  for (long long v : sums) check += v;
  std::printf("(checksum %lld) ", check & 1);
  return 4.0 * kBytes / s / 1e9;
}

}  // namespace

int main() {
  std::printf("first touch of 1 GiB: ordinary pages %.3f s, huge pages %.3f s\n", first_touch(false),
              first_touch(true));
  std::printf("read bandwidth, 2 threads: %.1f GB/s\n", read_bandwidth(2));
  return 0;
}
