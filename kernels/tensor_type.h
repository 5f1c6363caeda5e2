// Tensor element types as GGUF/ggml number them. A format fact shared by the loader
// (engine/) and the compute kernels (kernels/): block size, bytes per block, name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace chorus {

// Values are the on-disk ids (ggml_type). Gaps are ids ggml retired.
enum class TensorType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;  // ggml's spelling, e.g. "Q4_K"
  uint32_t block_elems;   // elements per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
  bool can_dequantize;    // chorus has a dequantization kernel for it
};

// The description of a known type id, or nullopt for an id that ggml never assigned
// or retired (the loader reports those as "unknown tensor type").
std::optional<TensorTypeInfo> tensor_type_info(uint32_t id);
const TensorTypeInfo& tensor_type_info(TensorType t);  // REQUIRES: t is a known type
std::string_view tensor_type_name(TensorType t);

// Bytes used by a row of `n_elems` elements.
// REQUIRES: n_elems is a multiple of the type's block size.
inline size_t tensor_row_bytes(const TensorTypeInfo& info, uint64_t n_elems) {
  return static_cast<size_t>(n_elems / info.block_elems) * info.block_bytes;
}

}  // namespace chorus
