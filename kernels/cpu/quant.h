// Activations quantized to int8 for the integer matrix kernels. Two layouts, one per family of
// weight formats:
//   BlockQ8   32 values, for the legacy 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0);
//   BlockQ8K 256 values, for the k-quants (Q4_K, Q5_K, Q6_K), whose sub-block scales are
//             integers: one float scale per 256 lets a whole super-block's products accumulate
//             in integers, as llama.cpp's Q8_K does.
#pragma once

#include <cstdint>

namespace chorus {

inline constexpr int kQ8Block = 32;
inline constexpr int kQ8KBlock = 256;

// 32 activations x ~= d * q[i]; s = d * sum(q) serves the weight formats with an offset or a
// minimum (Q4_0, Q4_1, Q5_0, Q5_1, and the +128 trick for Q8_0 on VNNI).
struct BlockQ8 {
  float d;
  float s;
  int8_t q[kQ8Block];
};
static_assert(sizeof(BlockQ8) == 40);

// 256 activations x ~= d * q[i], q in [-127, 127]; bsums[j] = sum of q[16 j .. 16 j + 15], for
// the k-quants' minimums (Q4_K, Q5_K) and offset (Q6_K).
struct BlockQ8K {
  float d;
  int8_t q[kQ8KBlock];
  int16_t bsums[kQ8KBlock / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

}  // namespace chorus
