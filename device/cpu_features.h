// What the CPU we run on can do, detected once (CPUID). Kernels dispatch on this at start-up,
// so one binary runs on machines with and without AVX-512.
#pragma once

#include <string>

namespace chorus {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avxvnni = false;
  int n_cores = 1;  // online logical CPUs
  std::string model_name;

  std::string summary() const;  // e.g. "AVX2 FMA F16C AVX512F ... (2 cores)"
};

// Detected once, then cached. Thread-safe.
const CpuFeatures& cpu_features();

}  // namespace chorus
