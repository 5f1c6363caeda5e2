// The AVX-512 table (F, BW, VL, VNNI). Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni (kernels/CMakeLists.txt); only ever called after the CPU was checked for them.
#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics leave the pass-through operand of masked forms undefined on
// purpose, and -O3 then reports it as uninitialized (a known false positive of the headers).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define CHORUS_VNNI 1
#include "kernels/cpu/gemm_x86_impl.h"

namespace chorus {

const CpuKernels* cpu_kernels_avx512() {
  static const CpuKernels table = make_x86_table("avx512");
  return &table;
}

}  // namespace chorus
#else
#include "kernels/cpu/cpu_kernels.h"
namespace chorus {
const CpuKernels* cpu_kernels_avx512() {
  return nullptr;
}
}  // namespace chorus
#endif
