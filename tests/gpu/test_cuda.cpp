// CUDA wiring: NCCL and the runtime link where the CUDA targets are built; the smoke kernel
// runs only where a GPU exists (label: gpu).
#include <gtest/gtest.h>

#include "device/cpu_features.h"
#include "device/cuda_info.h"

namespace chorus {
namespace {

TEST(Cpu, FeaturesAreDetected) {
  const CpuFeatures& f = cpu_features();
  EXPECT_GE(f.n_cores, 1);
  EXPECT_FALSE(f.summary().empty());
#if defined(__x86_64__)
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(f.avx512f, __builtin_cpu_supports("avx512f") != 0);
#endif
}

TEST(Cuda, InfoIsConsistentWithTheBuild) {
  const CudaInfo info = cuda_info();
#ifdef CHORUS_HAVE_CUDA
  EXPECT_TRUE(info.built);
  EXPECT_GT(info.nccl_version, 20000) << "NCCL must be linked";
  EXPECT_GT(info.runtime_version, 0);
#else
  EXPECT_FALSE(info.built);
  EXPECT_FALSE(info.error.empty());
#endif
}

TEST(Cuda, GpuSmokeKernel) {
  const CudaInfo info = cuda_info();
  if (info.device_count == 0) GTEST_SKIP() << "no CUDA device: " << info.error;
  EXPECT_EQ(cuda_smoke_test(), "");
}

}  // namespace
}  // namespace chorus
