// Weights onto a CUDA device (engine/forward/cuda/cuda_weights.h).
#include "engine/forward/cuda/cuda_weights.h"

#include <string>
#include <vector>

#include "device/cuda_device.h"
#include "engine/forward/cuda/cuda_op.h"
#include "kernels/cpu/dequant.h"

namespace chorus {

using cuda_detail::op;

Status cuda_upload_matrix_into(CudaDevice& dev, const WeightMatrix& w, cuda::bf16_bits* dst,
                               const char* name) {
  const int64_t mark = dev.mark();
  const int64_t bytes = w.rows * static_cast<int64_t>(w.row_bytes);
  auto staging = dev.alloc(bytes, std::string(name) + " (staging)");
  if (!staging) return staging.error();
  CHORUS_TRY(dev.upload(*staging, w.data, bytes));
  CHORUS_TRY(
      op(cuda::dequantize_rows_bf16(static_cast<int>(w.type), *staging, static_cast<int64_t>(w.row_bytes),
                                    w.rows, w.cols, dst, dev.stream()),
         name));
  CHORUS_TRY(dev.sync(name));
  dev.reset_to(mark);
  return Status::success();
}

Result<CudaMat> cuda_upload_matrix(CudaDevice& dev, const WeightMatrix& w, const char* name) {
  auto dst = dev.alloc(w.rows * w.cols * static_cast<int64_t>(sizeof(cuda::bf16_bits)), name);
  if (!dst) return dst.error();
  auto* p = static_cast<cuda::bf16_bits*>(*dst);
  if (Status s = cuda_upload_matrix_into(dev, w, p, name); !s.ok()) return s.error();
  return CudaMat{p, w.rows, w.cols};
}

Result<const float*> cuda_upload_matrix_f32(CudaDevice& dev, const WeightMatrix& w, const char* name) {
  if (!can_dequantize(w.type))
    return make_error(Errc::unsupported, std::string("cannot read ") + name + " (" +
                                             std::string(tensor_type_name(w.type)) + ") as f32");
  std::vector<float> rows(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r)
    dequantize_row(w.type, w.data + r * static_cast<int64_t>(w.row_bytes), rows.data() + r * w.cols, w.cols);
  return cuda_upload_vec(dev, rows.data(), w.rows * w.cols, name);
}

Result<const float*> cuda_upload_vec(CudaDevice& dev, const float* v, int64_t n, const char* name) {
  if (!v) return static_cast<const float*>(nullptr);
  auto dst = dev.alloc(n * static_cast<int64_t>(sizeof(float)), name);
  if (!dst) return dst.error();
  if (Status s = dev.upload(*dst, v, n * static_cast<int64_t>(sizeof(float))); !s.ok()) return s.error();
  return static_cast<const float*>(*dst);
}

}  // namespace chorus
