// Activations quantized to int8 for the integer matrix kernels: one block per 32 values.
#pragma once

#include <cstdint>

namespace chorus {

inline constexpr int kQ8Block = 32;

// 32 activations x ~= d * q[i]; s = d * sum(q) serves the weight formats with an offset or a
// minimum (Q4_0, Q4_1, Q5_0, Q5_1, and the +128 trick for Q8_0 on VNNI).
struct BlockQ8 {
  float d;
  float s;
  int8_t q[kQ8Block];
};
static_assert(sizeof(BlockQ8) == 40);

}  // namespace chorus
