// The AVX2 + FMA + F16C table. Compiled with -mavx2 -mfma -mf16c (kernels/CMakeLists.txt);
// only ever called after the CPU was checked for those features.
#if defined(__x86_64__)
#define CHORUS_VNNI 0
#include "kernels/cpu/gemm_x86_impl.h"

namespace chorus {

const CpuKernels* cpu_kernels_avx2() {
  static const CpuKernels table = make_x86_table("avx2");
  return &table;
}

}  // namespace chorus
#else
#include "kernels/cpu/cpu_kernels.h"
namespace chorus {
const CpuKernels* cpu_kernels_avx2() {
  return nullptr;
}
}  // namespace chorus
#endif
