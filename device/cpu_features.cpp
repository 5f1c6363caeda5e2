#include "device/cpu_features.h"

#include <fstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace chorus {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

std::string read_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const bool osxsave = c & (1u << 27);
    const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    const bool ymm_ok = (xcr0 & 0x6) == 0x6;
    const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
    f.fma = ymm_ok && (c & (1u << 12));
    f.f16c = ymm_ok && (c & (1u << 29));
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      f.avx2 = ymm_ok && (b & (1u << 5));
      f.avx512f = zmm_ok && (b & (1u << 16));
      f.avx512bw = zmm_ok && (b & (1u << 30));
      f.avx512vl = zmm_ok && (b & (1u << 31));
      f.avx512vnni = zmm_ok && (c & (1u << 11));
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
      f.avxvnni = ymm_ok && (a & (1u << 4));
      f.avx512bf16 = zmm_ok && (a & (1u << 5));
    }
  }
#endif
  const unsigned hw = std::thread::hardware_concurrency();
  f.n_cores = hw == 0 ? 1 : static_cast<int>(hw);
  f.model_name = read_model_name();
  return f;
}

}  // namespace

std::string CpuFeatures::summary() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "AVX2");
  add(fma, "FMA");
  add(f16c, "F16C");
  add(avxvnni, "AVX-VNNI");
  add(avx512f, "AVX512F");
  add(avx512bw, "AVX512BW");
  add(avx512vl, "AVX512VL");
  add(avx512vnni, "AVX512-VNNI");
  add(avx512bf16, "AVX512-BF16");
  if (s.empty()) s = "baseline";
  return s + " (" + std::to_string(n_cores) + " cores)";
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace chorus
