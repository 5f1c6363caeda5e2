// Activations quantized to int8 for the integer matrix kernels: one block per 32 values.
#pragma once

#include <cstdint>

#include "kernels/cpu/fp16.h"

namespace chorus {

inline constexpr int kQ8Block = 32;

// 32 activations x ~= d * q[i]. s = d * sum(q), rounded to f16 as llama.cpp's q8_1, serves the
// row kernels of the formats with an offset or a minimum (Q4_0, Q4_1, and the +128 trick for
// Q8_0 on VNNI); qsum[h] = sum of q[16 h .. 16 h + 15], exact, serves the panel kernels
// (kernels/cpu/panel.h) and their scalar reference, and so do dq[h] = d * float(qsum[h]) and
// dq[2] = d * float(qsum[0] + qsum[1]): the minimum terms' factors, computed once per block
// instead of once per block and 16 weight rows.
struct BlockQ8 {
  float d;
  float s;
  int8_t q[kQ8Block];
  int16_t qsum[2];
  float dq[3];
};
static_assert(sizeof(BlockQ8) == 56);

// Sets a block's scales and sums from its scale d = amax / 127 and its halves' sums; d and s
// are kept at f16 precision, as llama.cpp stores them. Always inlined: each instruction set's
// table compiles its own copy, and none may be shared.
[[gnu::always_inline]] inline void finish_q8(BlockQ8& b, float d_exact, int h0, int h1) {
  const float d = f16_to_f32(f32_to_f16(d_exact));
  b.d = d;
  b.s = f16_to_f32(f32_to_f16(d_exact * static_cast<float>(h0 + h1)));
  b.qsum[0] = static_cast<int16_t>(h0);
  b.qsum[1] = static_cast<int16_t>(h1);
  b.dq[0] = d * static_cast<float>(h0);
  b.dq[1] = d * static_cast<float>(h1);
  b.dq[2] = d * static_cast<float>(h0 + h1);
}

}  // namespace chorus
