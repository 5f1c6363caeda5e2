// Token embeddings: rows of a bf16 table gathered to f32.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void embed_kernel(const __nv_bfloat16* __restrict__ table, int64_t n_rows,
                             const int32_t* __restrict__ ids, int dim, float* __restrict__ out) {
  const int t = blockIdx.x;
  const int32_t id = ids[t];
  float* o = out + static_cast<int64_t>(t) * dim;
  if (id < 0 || id >= n_rows) {
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
      o[i] = __int_as_float(0x7fc00000);  // NaN: a bug made loud
    return;
  }
  const __nv_bfloat16* row = table + static_cast<int64_t>(id) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = __bfloat162float(row[i]);
}

}  // namespace

Status embed_rows(const bf16_bits* table, int64_t n_rows, const int32_t* ids, int n_ids, int dim, float* out,
                  Stream s) {
  if (n_ids < 0 || dim < 1 || n_rows < 1)
    return shape_error("embed_rows", "n_ids " + std::to_string(n_ids) + ", dim " + std::to_string(dim) +
                                         ", rows " + std::to_string(n_rows));
  if (!table || !ids || !out) return shape_error("embed_rows", "a null pointer");
  if (n_ids == 0) return {};
  embed_kernel<<<n_ids, 256, 0, stream_of(s)>>>(reinterpret_cast<const __nv_bfloat16*>(table), n_rows, ids,
                                                dim, out);
  return launch_status("embed_rows");
}

}  // namespace chorus::cuda
