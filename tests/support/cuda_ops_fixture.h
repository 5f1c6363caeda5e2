// The CUDA op tests' fixture (tests/gpu/test_cuda_ops.cpp, tests/gpu/test_cuda_ops_gdn.cpp): one device
// for the suite, host <-> device helpers, and the comparison every op test makes. One named
// namespace, so that both files' CudaOps tests share one fixture type (googletest requires it).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/cuda_device.h"
#include "device/cuda_info.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cuda/ops.h"

namespace chorus::cuda_ops_test {

using cuda::bf16_bits;

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// One device for the whole suite (a 1 GiB pool), or the reason there is none.
class CudaOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const CudaInfo info = cuda_info();
    if (info.device_count == 0) {
      skip_ = "no CUDA device: " + info.error;
      return;
    }
    auto d = CudaDevice::create({.device = 0, .pool_bytes = int64_t{1} << 30});
    if (!d) {
      skip_ = d.error().to_string();
      return;
    }
    dev_ = std::move(*d);
  }
  static void TearDownTestSuite() { dev_.reset(); }
  void SetUp() override {
    if (!dev_) GTEST_SKIP() << skip_;
    mark_ = dev_->mark();
  }
  void TearDown() override {
    if (dev_) dev_->reset_to(mark_);
  }

  template <class T>
  T* put(const std::vector<T>& host) {
    auto p = dev_->alloc(static_cast<int64_t>(host.size() * sizeof(T)), "test buffer");
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    if (!host.empty()) {
      EXPECT_TRUE(dev_->upload(*p, host.data(), static_cast<int64_t>(host.size() * sizeof(T))).ok());
    }
    return static_cast<T*>(*p);
  }
  template <class T>
  T* room(size_t n) {
    return put(std::vector<T>(n));
  }
  template <class T>
  std::vector<T> get(const T* dev, size_t n) {
    std::vector<T> host(n);
    const Status s = dev_->download(host.data(), dev, static_cast<int64_t>(n * sizeof(T)));
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    return host;
  }
  void* stream() { return dev_->stream(); }

  // Attention arguments over host tables: the K/V pools go up as f32 or, with bf16, as bf16 pages
  // (the values must be bf16-exact for a comparison); `out` gets room for every token's heads.
  cuda::AttnArgs attn_args(const std::vector<float>& q, const std::vector<float>& kpool,
                           const std::vector<float>& vpool, bool bf16, int64_t page_floats, int kv_stride,
                           const std::vector<int32_t>& page_ids, const std::vector<cuda::AttnSegment>& segs,
                           const std::vector<cuda::AttnToken>& toks, int n_heads, int n_kv_heads,
                           int head_dim, int n_rot, bool neox, float theta_scale) {
    cuda::AttnArgs a;
    a.q = put(q);
    if (bf16) {
      std::vector<bf16_bits> kb(kpool.size()), vb(vpool.size());
      for (size_t i = 0; i < kb.size(); ++i) {
        kb[i] = f32_to_bf16(kpool[i]);
        vb[i] = f32_to_bf16(vpool[i]);
      }
      a.k_pool = put(kb);
      a.v_pool = put(vb);
    } else {
      a.k_pool = put(kpool);
      a.v_pool = put(vpool);
    }
    a.kv_bf16 = bf16;
    a.page_stride = page_floats;
    a.kv_stride = kv_stride;
    a.page_ids = put(page_ids);
    a.segs = put(segs);
    a.tokens = put(toks);
    a.n_tokens = static_cast<int>(toks.size());
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.n_rot = n_rot;
    a.theta_scale = theta_scale;
    a.freq_scale = 1.0f;
    a.neox = neox;
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    a.out = room<float>(toks.size() * static_cast<size_t>(n_heads) * head_dim);
    return a;
  }

  static inline std::unique_ptr<CudaDevice> dev_;
  static inline std::string skip_;
  int64_t mark_ = 0;
};

// |got - want| <= rel * max|want| everywhere; prints the largest error seen (relative to the same
// scale), so a device run shows how much room each bound leaves.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0, worst = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  scale = std::max(scale, 1e-30);
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::isnan(err) ? INFINITY : std::max(worst, err);
    ASSERT_LE(err, rel * scale) << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
  std::printf("  %s: largest error %.2e of max |want| (bound %.0e)\n", what.c_str(), worst / scale, rel);
}

inline const CpuKernels& ref() {
  return cpu_kernels_scalar();
}

}  // namespace chorus::cuda_ops_test
