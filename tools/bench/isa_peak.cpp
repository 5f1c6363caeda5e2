// How many 512-bit vpdpbusd and FMA instructions one core retires per second, alone and mixed
// 8 to 4 (the panel products' ratio of integer dot steps to float work per 32 weights and
// token), and vpdpbusd with its 4 activations broadcast by a separate vpbroadcastd (what GCC 12
// emits for _mm512_set1_epi32) or by the instruction itself ({1to16}, as the panel kernels now
// write it): the instruction bounds of the products in docs/performance.md. Build and run:
//   g++ -O3 -mavx512f -mavx512bw -mavx512vnni tools/bench/isa_peak.cpp -o /tmp/isa_peak && /tmp/isa_peak
// GCC 12 reports the reductions' undefined pass-through operands as uninitialized (its headers'
// known false positive, as in kernels/cpu/kernels_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

constexpr long kIters = 100000000;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

alignas(64) int8_t activations[64 * 56];

__m512i dot_separate(__m512i acc, __m512i w, const int8_t* x4) {
  int32_t v;
  std::memcpy(&v, x4, 4);
  return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(v));
}

__m512i dot_embedded(__m512i acc, __m512i w, const int8_t* x4) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x4)));
  return acc;
}

// A panel tile's dot steps: 8 tokens x 8 steps of 4 activations against 8 weight vectors.
template <bool kEmbedded>
double broadcast_rate() {
  __m512i acc[8], w[8];
  for (int i = 0; i < 8; ++i) {
    acc[i] = _mm512_setzero_si512();
    w[i] = _mm512_set1_epi8(static_cast<char>(i + 1));
  }
  constexpr long kTiles = kIters / 5;
  const auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < kTiles; ++n) {
    const int8_t* x = activations + (n & 63) * 44;
    for (int t = 0; t < 8; ++t)
      for (int j = 0; j < 8; ++j)
        acc[t] = kEmbedded ? dot_embedded(acc[t], w[j], x + 4 * t + 4 * j % 32)
                           : dot_separate(acc[t], w[j], x + 4 * t + 4 * j % 32);
  }
  const double rate = 64.0 * kTiles / seconds_since(t0);
  __m512i s = acc[0];
  for (int i = 1; i < 8; ++i) s = _mm512_add_epi32(s, acc[i]);
  std::printf("(checksum %d) ", _mm512_reduce_add_epi32(s));
  return rate;
}

}  // namespace

int main() {
  for (int i = 0; i < 64 * 56; ++i) activations[i] = static_cast<int8_t>(i * 7);
  // 12 independent chains each: enough to cover either instruction's latency.
  __m512i acc_i[12];
  __m512 acc_f[12];
  for (int i = 0; i < 12; ++i) {
    acc_i[i] = _mm512_set1_epi32(i);
    acc_f[i] = _mm512_set1_ps(static_cast<float>(i));
  }
  const __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(1);
  const __m512 b = _mm512_set1_ps(0.5f), c = _mm512_set1_ps(1.0f);  // converges to 2: no overflow

  auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < kIters; ++n)
    for (int i = 0; i < 12; ++i) acc_i[i] = _mm512_dpbusd_epi32(acc_i[i], w, x);
  const double vnni = 12.0 * kIters / seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < kIters; ++n)
    for (int i = 0; i < 12; ++i) acc_f[i] = _mm512_fmadd_ps(acc_f[i], b, c);
  const double fma = 12.0 * kIters / seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < kIters; ++n) {
    for (int i = 0; i < 8; ++i) acc_i[i] = _mm512_dpbusd_epi32(acc_i[i], w, x);
    for (int i = 0; i < 4; ++i) acc_f[i] = _mm512_fmadd_ps(acc_f[i], b, c);
  }
  const double mixed = 12.0 * kIters / seconds_since(t0);

  __m512i si = acc_i[0];
  __m512 sf = acc_f[0];
  for (int i = 1; i < 12; ++i) {
    si = _mm512_add_epi32(si, acc_i[i]);
    sf = _mm512_add_ps(sf, acc_f[i]);
  }
  std::printf("vpdpbusd zmm alone:        %.2f G/s per core\n", vnni / 1e9);
  std::printf("vfmadd zmm alone:          %.2f G/s per core\n", fma / 1e9);
  std::printf("8 vpdpbusd + 4 vfmadd:     %.2f G instructions/s per core (%.2f G vpdpbusd/s)\n", mixed / 1e9,
              mixed / 1e9 * 8 / 12);
  std::printf("(checksums %d %.1f)\n", _mm512_reduce_add_epi32(si), _mm512_reduce_add_ps(sf));
  const double separate = broadcast_rate<false>();
  std::printf("vpdpbusd, separate vpbroadcastd: %.2f G/s per core\n", separate / 1e9);
  const double embedded = broadcast_rate<true>();
  std::printf("vpdpbusd, embedded {1to16}:      %.2f G/s per core (%.2fx)\n", embedded / 1e9,
              embedded / separate);
  return 0;
}
