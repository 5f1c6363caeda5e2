// The CPU attention kernel alone (CpuKernels::attention, the best table this CPU runs): time per
// 16-position page and KV head for the default model's shape (3 queries per KV head, head size
// 64, 3 KV heads), with the pages in cache (one view, called over and over) and out of it (one
// view per call, over 65 MB of pages, as an 8-sequence step's are): docs/performance.md.
//   build/chorus_attention_bench [--views N] [--positions P] [--reps R]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "device/cpu_device.h"
#include "kernels/cpu/cpu_kernels.h"

namespace {

using namespace chorus;

double ns_per_page(const CpuKernels& k, int views, int positions, int reps) {
  constexpr int d = 64, kv_heads = 3, stride = kv_heads * d, queries = 3;
  const int pages = (positions + kKvPageSize - 1) / kKvPageSize;
  const size_t page_floats = static_cast<size_t>(kKvPageSize) * stride;
  std::vector<float> keys(static_cast<size_t>(views) * pages * page_floats), values(keys.size());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : keys) x = u(rng);
  for (float& x : values) x = u(rng);
  std::vector<float> q(queries * d), out(queries * d),
      scratch(attention_scratch_floats(queries, positions, d));
  for (float& x : q) x = u(rng);
  std::vector<const float*> kp(static_cast<size_t>(views) * pages), vp(kp.size());
  for (size_t i = 0; i < kp.size(); ++i) {
    kp[i] = &keys[i * page_floats];
    vp[i] = &values[i * page_floats];
  }
  auto pass = [&] {
    for (int v = 0; v < views; ++v)
      for (int h = 0; h < kv_heads; ++h) {
        AttentionSegment seg{q.data(), &kp[static_cast<size_t>(v) * pages],
                             &vp[static_cast<size_t>(v) * pages], positions};
        AttentionArgs a{&seg, 1,      queries,    stride,         int64_t{h} * d,
                        d,    0.125f, out.data(), scratch.data(), false};
        k.attention(a);
      }
  };
  pass();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) pass();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s * 1e9 / (static_cast<double>(reps) * views * kv_heads * pages);
}

}  // namespace

int main(int argc, char** argv) {
  int positions = 176, reps = 20, views = 240;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--positions") == 0) positions = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--views") == 0) views = std::atoi(argv[i + 1]);
  }
  if (positions < 1 || reps < 1 || views < 1) {
    std::fprintf(stderr, "usage: %s [--views N] [--positions P] [--reps R] (all at least 1)\n", argv[0]);
    return 2;
  }
  const CpuKernels& k = best_cpu_kernels();
  const int in_cache_reps = reps * views;  // as many calls as the out-of-cache pass makes
  std::printf("attention, %s, %d positions, 3 queries per KV head, head size 64:\n", k.isa, positions);
  std::printf("  in cache     %7.1f ns per page and head (one view, %d passes)\n",
              ns_per_page(k, 1, positions, in_cache_reps), in_cache_reps);
  std::printf("  out of cache %7.1f ns per page and head (%d views, %.1f MB of pages, %d passes)\n",
              ns_per_page(k, views, positions, reps), views,
              2.0 * views * ((positions + 15) / 16) * 16 * 192 * 4 / 1e6, reps);
  return 0;
}
