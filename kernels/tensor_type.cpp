#include "kernels/tensor_type.h"

#include <array>
#include <cassert>

namespace chorus {
namespace {

constexpr uint32_t qk = 32;     // elements per block of the legacy quants
constexpr uint32_t qk_k = 256;  // elements per super-block of the k-quants

// Sizes follow the block layouts in ggml's ggml-common.h (read for the facts).
constexpr std::array<TensorTypeInfo, 32> kTypes = {{
    {TensorType::f32, "F32", 1, 4, true},
    {TensorType::f16, "F16", 1, 2, true},
    {TensorType::q4_0, "Q4_0", qk, 2 + qk / 2, true},
    {TensorType::q4_1, "Q4_1", qk, 4 + qk / 2, true},
    {TensorType::q5_0, "Q5_0", qk, 2 + 4 + qk / 2, true},
    {TensorType::q5_1, "Q5_1", qk, 4 + 4 + qk / 2, true},
    {TensorType::q8_0, "Q8_0", qk, 2 + qk, true},
    {TensorType::q8_1, "Q8_1", qk, 4 + qk, false},
    {TensorType::q2_k, "Q2_K", qk_k, 84, true},
    {TensorType::q3_k, "Q3_K", qk_k, 110, true},
    {TensorType::q4_k, "Q4_K", qk_k, 144, true},
    {TensorType::q5_k, "Q5_K", qk_k, 176, true},
    {TensorType::q6_k, "Q6_K", qk_k, 210, true},
    {TensorType::q8_k, "Q8_K", qk_k, 292, false},
    {TensorType::iq2_xxs, "IQ2_XXS", qk_k, 66, false},
    {TensorType::iq2_xs, "IQ2_XS", qk_k, 74, false},
    {TensorType::iq3_xxs, "IQ3_XXS", qk_k, 98, false},
    {TensorType::iq1_s, "IQ1_S", qk_k, 50, false},
    {TensorType::iq4_nl, "IQ4_NL", qk, 18, true},
    {TensorType::iq3_s, "IQ3_S", qk_k, 110, false},
    {TensorType::iq2_s, "IQ2_S", qk_k, 82, false},
    {TensorType::iq4_xs, "IQ4_XS", qk_k, 136, true},
    {TensorType::i8, "I8", 1, 1, false},
    {TensorType::i16, "I16", 1, 2, false},
    {TensorType::i32, "I32", 1, 4, false},
    {TensorType::i64, "I64", 1, 8, false},
    {TensorType::f64, "F64", 1, 8, false},
    {TensorType::iq1_m, "IQ1_M", qk_k, 56, false},
    {TensorType::bf16, "BF16", 1, 2, true},
    {TensorType::tq1_0, "TQ1_0", qk_k, 54, false},
    {TensorType::tq2_0, "TQ2_0", qk_k, 66, false},
    {TensorType::mxfp4, "MXFP4", qk, 17, false},
}};

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

const TensorTypeInfo& tensor_type_info(TensorType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t;
  assert(false && "tensor_type_info: unknown type");
  return kTypes[0];
}

std::string_view tensor_type_name(TensorType t) {
  return tensor_type_info(t).name;
}

}  // namespace chorus
