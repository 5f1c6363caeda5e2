// Dequantization of GGUF tensor rows to f32: the scalar reference for every storage type
// chorus reads. Optimized matrix kernels (a later layer) are tested against these.
#pragma once

#include <cstdint>

#include "kernels/tensor_type.h"

namespace chorus {

// True when dequantize_row() supports `type` (TensorTypeInfo::can_dequantize).
bool can_dequantize(TensorType type);

// Converts `n` consecutive elements starting at `src` (block-aligned) to f32.
// REQUIRES: can_dequantize(type); n is a multiple of the type's block size;
//           src holds n / block_elems blocks; dst has room for n floats.
// Thread-safe (pure function).
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

}  // namespace chorus
