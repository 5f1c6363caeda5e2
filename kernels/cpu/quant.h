// Activations quantized to int8 for the integer matrix kernels: one block per 32 values.
#pragma once

#include <cstdint>

namespace chorus {

inline constexpr int kQ8Block = 32;

// 32 activations x ~= d * q[i]. s = d * sum(q), rounded to f16 as llama.cpp's q8_1, serves the
// row kernels of the formats with an offset or a minimum (Q4_0, Q4_1, and the +128 trick for
// Q8_0 on VNNI); qsum[h] = sum of q[16 h .. 16 h + 15], exact, serves the panel kernels
// (kernels/cpu/panel.h) and their scalar reference.
struct BlockQ8 {
  float d;
  float s;
  int8_t q[kQ8Block];
  int16_t qsum[2];
};
static_assert(sizeof(BlockQ8) == 44);

}  // namespace chorus
