// GELU as llama.cpp's CPU backend computes it: the tanh approximation
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2)))
// looked up in a table of every f16 input (x rounded to f16; the result rounded to f16), 0 for
// x <= -10 and x itself for x >= 10. So a GeGLU feed-forward (Gemma) agrees with llama.cpp's to
// the bit where its inputs do.
#pragma once

#include <cstdint>

namespace chorus {

// gelu of every binary16 value, as binary16: 65,536 entries, made on the first call.
const uint16_t* gelu_f16_table();

}  // namespace chorus
