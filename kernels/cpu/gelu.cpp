#include "kernels/cpu/gelu.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/fp16.h"

namespace chorus {

const uint16_t* gelu_f16_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(1u << 16);
    constexpr float kA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
    for (uint32_t i = 0; i < t.size(); ++i) {
      const float x = f16_to_f32(static_cast<uint16_t>(i));
      // The order llama.cpp's build (-march=native, contraction on) computes it in.
      const float inner = kSqrt2OverPi * x * std::fma(kA * x, x, 1.0f);
      t[i] = f32_to_f16(0.5f * x * (1.0f + std::tanh(inner)));
    }
    return t;
  }();
  return table.data();
}

}  // namespace chorus
