// Every CUDA op against its CPU reference (the scalar kernel table, or plain double arithmetic
// where the CPU has no such op). Label: gpu. Without a device the numeric tests skip with the
// reason; the shape checks run anyway (they return before anything touches a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "engine/sampler.h"
#include "gpu/cuda_device.h"
#include "gpu/cuda_info.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/gdn.h"

#ifdef CHORUS_HAVE_CUDA
#include "kernels/cuda/ops.h"
#endif

namespace chorus {
namespace {

#ifdef CHORUS_HAVE_CUDA

using cuda::bf16_bits;

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
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
  cuda::AttnArgs attn_args(const std::vector<float>& q, const std::vector<float>& kpool, const std::vector<float>& vpool,
                           bool bf16, int64_t page_floats, int kv_stride, const std::vector<int32_t>& page_ids,
                           const std::vector<cuda::AttnSegment>& segs, const std::vector<cuda::AttnToken>& toks,
                           int n_heads, int n_kv_heads, int head_dim, int n_rot, bool neox, float theta_scale) {
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
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, const std::string& what) {
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

const CpuKernels& ref() { return cpu_kernels_scalar(); }

TEST_F(CudaOps, RmsNorm) {
  const int rows = 3, n = 576;
  const auto x = random_floats(rows * n, 1), w = random_floats(n, 2, 0.5f, 1.5f);
  std::vector<float> want(rows * n);
  for (int r = 0; r < rows; ++r) ref().rmsnorm(x.data() + r * n, w.data(), want.data() + r * n, n, 1e-5f);
  float* y = room<float>(rows * n);
  ASSERT_EQ(cuda::rmsnorm(put(x), put(w), y, rows, n, 1e-5f, stream()), "");
  expect_close(get(y, rows * n), want, 2e-6, "rmsnorm");
  float* inplace = put(x);  // y = x, as the q/k norms run
  ASSERT_EQ(cuda::rmsnorm(inplace, put(w), inplace, rows, n, 1e-5f, stream()), "");
  expect_close(get(inplace, rows * n), want, 2e-6, "rmsnorm in place");
}

TEST_F(CudaOps, RopeBothLayoutsAndPartialRotation) {
  const int n_tokens = 3, n_heads = 2, head_dim = 64;
  const std::vector<int32_t> pos = {0, 7, 1000};
  for (const bool neox : {false, true})
    for (const int n_rot : {64, 32}) {
      auto x = random_floats(n_tokens * n_heads * head_dim, 3);
      std::vector<float> want = x;
      const float theta_scale = std::pow(10000.0f, -2.0f / static_cast<float>(n_rot));
      std::vector<float> cs(n_rot);
      for (int t = 0; t < n_tokens; ++t) {
        ref().rope_cache(cs.data(), n_rot, theta_scale, 1.0f, static_cast<float>(pos[t]));
        for (int h = 0; h < n_heads; ++h) ref().rope(want.data() + (t * n_heads + h) * head_dim, n_rot, cs.data(), neox);
      }
      float* dx = put(x);
      ASSERT_EQ(cuda::rope(dx, put(pos), n_tokens, n_heads, head_dim, n_rot, theta_scale, 1.0f, neox, stream()), "");
      expect_close(get(dx, x.size()), want, 1e-6, neox ? "rope neox" : "rope");
    }
}

TEST_F(CudaOps, SwigluAndAdd) {
  const int n = 1000;
  const auto g = random_floats(n, 4, -6, 6), u = random_floats(n, 5);
  std::vector<float> want(n);
  ref().swiglu(g.data(), u.data(), want.data(), n);
  float* out = room<float>(n);
  ASSERT_EQ(cuda::swiglu(put(g), put(u), out, n, stream()), "");
  expect_close(get(out, n), want, 1e-6, "swiglu");
  float* dg = put(g);  // out = gate, as the feed-forward runs
  ASSERT_EQ(cuda::swiglu(dg, put(u), dg, n, stream()), "");
  expect_close(get(dg, n), want, 1e-6, "swiglu in place");
  std::vector<float> y = u;
  ref().add(y.data(), g.data(), n);
  float* dy = put(u);
  ASSERT_EQ(cuda::add(dy, put(g), n, stream()), "");
  expect_close(get(dy, n), y, 0, "add");
  // A bias on every row: 3 rows of 7 (a length that fills no warp).
  const int64_t rows = 3, cols = 7;
  std::vector<float> yb(u.begin(), u.begin() + rows * cols), bias(g.begin(), g.begin() + cols);
  float* dyb = put(yb);
  for (int64_t r = 0; r < rows; ++r) ref().add(yb.data() + r * cols, bias.data(), cols);
  ASSERT_EQ(cuda::add_rows(dyb, put(bias), rows, cols, stream()), "");
  expect_close(get(dyb, rows * cols), yb, 0, "add_rows");
  EXPECT_NE(cuda::add_rows(dyb, put(bias), rows, 0, stream()), "") << "no columns: a shape error";
}

// Attention output gates, as the CPU runner does them (engine/model_runner.cpp): attn_q's rows
// split into each head's query and gate, then the attention output times sigmoid(gate).
TEST_F(CudaOps, AttentionOutputGate) {
  const int T = 3, H = 4, HD = 64;
  const auto qg = random_floats(T * H * 2 * HD, 8, -6, 6), out = random_floats(T * H * HD, 9);
  std::vector<float> want_q(T * H * HD), want_g(T * H * HD), want_out = out;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < HD; ++i) {
        const int64_t o = (int64_t{t} * H + h) * HD + i, src = (int64_t{t} * 2 * H + 2 * h) * HD + i;
        want_q[o] = qg[src];
        want_g[o] = qg[src + HD];
        want_out[o] *= 1.0f / (1.0f + std::exp(-qg[src + HD]));
      }
  float *q = room<float>(T * H * HD), *g = room<float>(T * H * HD);
  ASSERT_EQ(cuda::split_query_gate(put(qg), q, g, T, H, HD, stream()), "");
  expect_close(get(q, T * H * HD), want_q, 0, "split: queries");
  expect_close(get(g, T * H * HD), want_g, 0, "split: gates");
  float* y = put(out);
  ASSERT_EQ(cuda::sigmoid_mul(y, g, int64_t{T} * H * HD, stream()), "");
  expect_close(get(y, T * H * HD), want_out, 1e-6, "sigmoid_mul");
  EXPECT_NE(cuda::split_query_gate(put(qg), q, g, T, 0, HD, stream()), "") << "no heads: a shape error";
}

TEST_F(CudaOps, EmbedRowsAndBadIds) {
  const int rows = 10, dim = 96;
  std::vector<bf16_bits> table(rows * dim);
  const auto vals = random_floats(table.size(), 6);
  for (size_t i = 0; i < table.size(); ++i) table[i] = f32_to_bf16(vals[i]);
  const std::vector<int32_t> ids = {3, 0, 9, -1, 10};
  float* out = room<float>(ids.size() * dim);
  ASSERT_EQ(cuda::embed_rows(put(table), rows, put(ids), static_cast<int>(ids.size()), dim, out, stream()), "");
  const auto got = get(out, ids.size() * dim);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int i = 0; i < dim; ++i) {
      const float g = got[t * dim + i];
      if (ids[t] < 0 || ids[t] >= rows)
        EXPECT_TRUE(std::isnan(g)) << "an id out of range gives NaN, token " << t;
      else
        ASSERT_EQ(g, bf16_to_f32(table[ids[t] * dim + i]));
    }
}

// Random blocks of each GGUF type, converted on the device, against the CPU dequantizer rounded
// to bf16.
TEST_F(CudaOps, DequantizeRowsToBf16) {
  std::mt19937 rng(7);
  for (const TensorType type : {TensorType::q8_0, TensorType::q4_0, TensorType::q4_1, TensorType::f16,
                                TensorType::f32, TensorType::bf16}) {
    const TensorTypeInfo& info = tensor_type_info(type);
    const int64_t rows = 5, cols = 256;
    const size_t row_bytes = tensor_row_bytes(info, cols) + 4;  // padded: the kernel must use row_bytes
    std::vector<uint8_t> raw(rows * row_bytes);
    for (auto& b : raw) b = static_cast<uint8_t>(rng());
    // Keep the scales (and every f16/f32/bf16 value) finite and moderate: f16 0x3c00-ish.
    auto moderate_f16 = [&](uint8_t* p) {
      const uint16_t h = static_cast<uint16_t>(0x2000 + rng() % 0x2000);  // ~0.008 .. 2, positive
      std::memcpy(p, &h, 2);
    };
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* row = raw.data() + r * row_bytes;
      if (type == TensorType::f32) {
        for (int64_t c = 0; c < cols; ++c) {
          const float v = std::uniform_real_distribution<float>(-2, 2)(rng);
          std::memcpy(row + 4 * c, &v, 4);
        }
      } else if (type == TensorType::f16) {
        for (int64_t c = 0; c < cols; ++c) moderate_f16(row + 2 * c);
      } else if (type == TensorType::bf16) {
        for (int64_t c = 0; c < cols; ++c) {
          const bf16_bits b = f32_to_bf16(std::uniform_real_distribution<float>(-2, 2)(rng));
          std::memcpy(row + 2 * c, &b, 2);
        }
      } else {
        for (int64_t b = 0; b < cols / 32; ++b) {
          moderate_f16(row + b * info.block_bytes);
          if (type == TensorType::q4_1) moderate_f16(row + b * info.block_bytes + 2);
        }
      }
    }
    std::vector<float> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r) dequantize_row(type, raw.data() + r * row_bytes, want.data() + r * cols, cols);
    bf16_bits* dst = room<bf16_bits>(rows * cols);
    ASSERT_EQ(cuda::dequantize_rows_bf16(static_cast<int>(type), put(raw), static_cast<int64_t>(row_bytes), rows, cols,
                                         dst, stream()),
              "")
        << info.name;
    const auto got = get(dst, rows * cols);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], f32_to_bf16(want[i])) << info.name << " at " << i << ": want " << want[i];
  }
}

// Head shapes for the attention tests: groups of 4, 8 (the most the kernels take) and 1, llama-like
// (64, all rotated, pairs), Qwen3.5-like (256, 64 rotated, neox) and bf16 pages.
struct AttnCase {
  int head_dim, n_rot;
  bool neox, bf16;
  int n_heads, n_kv_heads;
};
constexpr AttnCase kAttnCases[] = {{64, 64, false, false, 8, 2}, {256, 64, true, false, 16, 2}, {128, 128, true, true, 4, 4}};

// The view kernel against the CPU's attention over the same blocks, for llama-like (head_dim 64,
// all dims rotated) and Qwen3.5-like (head_dim 256, 64 rotated, neox) heads, f32 and bf16 pages;
// two query tokens, the second seeing one more position of the block being written.
TEST_F(CudaOps, ViewAttentionMatchesTheCpu) {
  // Strides padded, so a kernel that derived a position's or a page's stride from the head counts
  // would read the wrong keys.
  for (const AttnCase c : kAttnCases) {
    const int n_heads = c.n_heads, n_kv_heads = c.n_kv_heads, nq = n_heads / n_kv_heads, hd = c.head_dim;
    const int kv_stride = n_kv_heads * hd + 32;
    const int64_t page_floats = 16 * int64_t{kv_stride} + 64;  // the page stride
    // Three blocks of 21, 40 and 7 (+1 for the second token) positions; pages scattered in a pool.
    const std::vector<int> block_len = {21, 40, 8};
    std::vector<std::vector<int32_t>> pages(3);
    int next_page = 0;
    std::vector<int32_t> order;
    for (int b = 0; b < 3; ++b)
      for (int p = 0; p < (block_len[b] + 15) / 16; ++p) order.push_back(next_page++);
    std::shuffle(order.begin(), order.end(), std::mt19937(11));
    int k = 0;
    for (int b = 0; b < 3; ++b)
      for (int p = 0; p < (block_len[b] + 15) / 16; ++p) pages[b].push_back(order[k++]);
    const int n_pages = next_page;
    auto kpool = random_floats(n_pages * page_floats, 12), vpool = random_floats(n_pages * page_floats, 13);
    if (c.bf16)  // values the bf16 pages hold exactly, so both sides see the same keys
      for (auto* pool : {&kpool, &vpool})
        for (float& x : *pool) x = bf16_to_f32(f32_to_bf16(x));
    const auto q = random_floats(2 * n_heads * hd, 14);
    const float theta_scale = std::pow(1e6f, -2.0f / static_cast<float>(c.n_rot)), scale = 1.0f / std::sqrt(float(hd));
    // Token 0 is at view position 21 + 40 + 6 (attends 7 of the last block), token 1 at +1.
    const int offsets[3] = {0, 21, 61};
    std::vector<float> want(2 * n_heads * hd);
    for (int t = 0; t < 2; ++t) {
      const int view_pos = 67 + t;
      const int n_kv[3] = {21, 40, 7 + t};
      for (int kvh = 0; kvh < n_kv_heads; ++kvh) {
        // CPU layout: keys dimension-major per page, values position-major.
        std::vector<std::vector<float>> kp_cpu(n_pages, std::vector<float>(page_floats));
        for (int p = 0; p < n_pages; ++p)
          for (int pos = 0; pos < 16; ++pos)
            for (int d = 0; d < kv_stride; ++d) kp_cpu[p][d * 16 + pos] = kpool[p * page_floats + pos * kv_stride + d];
        std::vector<std::vector<float>> qrot(3, std::vector<float>(nq * hd));
        std::vector<std::vector<const float*>> kptr(3), vptr(3);
        std::vector<AttentionSegment> segs(3);
        std::vector<float> cs(c.n_rot);
        for (int b = 0; b < 3; ++b) {
          ref().rope_cache(cs.data(), c.n_rot, theta_scale, 1.0f, static_cast<float>(view_pos - offsets[b]));
          for (int h = 0; h < nq; ++h) {
            std::copy_n(q.data() + (t * n_heads + kvh * nq + h) * hd, hd, qrot[b].data() + h * hd);
            ref().rope(qrot[b].data() + h * hd, c.n_rot, cs.data(), c.neox);
          }
          for (int32_t p : pages[b]) {
            kptr[b].push_back(kp_cpu[p].data());
            vptr[b].push_back(vpool.data() + p * page_floats);
          }
          segs[b] = {qrot[b].data(), kptr[b].data(), vptr[b].data(), n_kv[b]};
        }
        std::vector<float> scratch(attention_scratch_floats(nq, n_kv[0] + n_kv[1] + n_kv[2], hd));
        AttentionArgs a{segs.data(), 3, nq, kv_stride, int64_t{kvh} * hd, hd, scale,
                        want.data() + (t * n_heads + kvh * nq) * hd, scratch.data(), false};
        ref().attention(a);
      }
    }
    // The device side: one page list, three segments per token.
    std::vector<int32_t> page_ids;
    std::vector<cuda::AttnSegment> dsegs;
    std::vector<cuda::AttnToken> toks;
    for (int t = 0; t < 2; ++t) {
      toks.push_back({static_cast<int32_t>(dsegs.size()), 3});
      for (int b = 0; b < 3; ++b) {
        dsegs.push_back({static_cast<int32_t>(page_ids.size()), b == 2 ? 7 + t : block_len[b], 67 + t - offsets[b]});
        page_ids.insert(page_ids.end(), pages[b].begin(), pages[b].end());
      }
    }
    const cuda::AttnArgs a = attn_args(q, kpool, vpool, c.bf16, page_floats, kv_stride, page_ids, dsegs, toks, n_heads,
                                       n_kv_heads, hd, c.n_rot, c.neox, theta_scale);
    ASSERT_EQ(cuda::attention(a, stream()), "");
    expect_close(get(a.out, want.size()), want, 4e-6,
                 "attention hd " + std::to_string(hd) + " group " + std::to_string(nq) + (c.bf16 ? " bf16" : " f32"));
  }
}

// The tiled prefill kernel against the per-token kernel (checked against the CPU above) on the
// same tables: 70 tokens of a block written through a view [A, W, C] with W in the middle (the
// runs of 32, 32 and 6 see A whole, W causally and C whole, each row its own rotations), and two
// decode tokens of other sequences (tiles of one) seeing A; for three head shapes, f32 and bf16
// pages.
TEST_F(CudaOps, TiledAttentionEqualsPerTokenAttention) {
  for (const AttnCase c : kAttnCases) {
    const int hd = c.head_dim, kv_stride = c.n_kv_heads * hd + 32;
    const int64_t page_floats = 16 * int64_t{kv_stride} + 64;
    const int len_a = 50, len_w = 70, len_c = 20;
    std::vector<int32_t> order(static_cast<size_t>((len_a + 15) / 16 + (len_w + 15) / 16 + (len_c + 15) / 16));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), std::mt19937(21));
    std::vector<int32_t> page_ids = order;  // A's pages, then W's, then C's
    const int32_t first_a = 0, first_w = (len_a + 15) / 16, first_c = first_w + (len_w + 15) / 16;
    auto kpool = random_floats(order.size() * page_floats, 22), vpool = random_floats(order.size() * page_floats, 23);
    const int n_tok = len_w + 2;
    const auto q = random_floats(static_cast<size_t>(n_tok) * c.n_heads * hd, 24);
    std::vector<cuda::AttnSegment> segs;
    std::vector<cuda::AttnToken> toks;
    for (int p = 0; p < len_w; ++p) {
      toks.push_back({static_cast<int32_t>(segs.size()), 3});
      segs.push_back({first_a, len_a, len_a + p, 0});
      segs.push_back({first_w, p + 1, p, 0});
      segs.push_back({first_c, len_c, len_a + p - (len_a + len_w), 0});
    }
    for (int d = 0; d < 2; ++d) {
      toks.push_back({static_cast<int32_t>(segs.size()), 1});
      segs.push_back({first_a, len_a - d, 200 + d, 0});
    }
    std::vector<cuda::AttnTile> tiles = {{0, 32}, {32, 32}, {64, 6}, {70, 1}, {71, 1}};
    cuda::AttnArgs a = attn_args(q, kpool, vpool, c.bf16, page_floats, kv_stride, page_ids, segs, toks, c.n_heads,
                                 c.n_kv_heads, hd, c.n_rot, c.neox, std::pow(1e6f, -2.0f / static_cast<float>(c.n_rot)));
    const size_t n_out = static_cast<size_t>(n_tok) * c.n_heads * hd;
    ASSERT_EQ(cuda::attention(a, stream()), "");
    const auto want = get(a.out, n_out);
    a.out = room<float>(n_out);
    ASSERT_EQ(cuda::attention_tiled(a, put(tiles), static_cast<int>(tiles.size()), stream()), "");
    expect_close(get(a.out, n_out), want, 2e-6,
                 "tiled attention hd " + std::to_string(hd) + " group " + std::to_string(c.n_heads / c.n_kv_heads) +
                     (c.bf16 ? " bf16" : " f32"));
  }
}

TEST_F(CudaOps, GatedDeltaNetDecodeMatchesTheCpuStep) {
  for (const bool kh_mod : {true, false}) {
    const int n_seq = 2, hk = 2, hv = 4, dk = 128, dv = 96;  // dk != dv: a swap of the two shows
    std::vector<std::vector<float>> S(n_seq);
    for (int s = 0; s < n_seq; ++s) S[s] = random_floats(hv * dv * dk, 20 + s, -0.1f, 0.1f);
    auto q = random_floats(n_seq * hk * dk, 30), k = random_floats(n_seq * hk * dk, 31);
    for (auto* x : {&q, &k})  // L2-normalised rows, as the model feeds them
      for (int r = 0; r < n_seq * hk; ++r) {
        double n2 = 0;
        for (int i = 0; i < dk; ++i) n2 += double((*x)[r * dk + i]) * (*x)[r * dk + i];
        for (int i = 0; i < dk; ++i) (*x)[r * dk + i] /= static_cast<float>(std::sqrt(n2));
      }
    const auto v = random_floats(n_seq * hv * dv, 32), g = random_floats(n_seq * hv, 33, -2, -0.01f),
               beta = random_floats(n_seq * hv, 34, 0.05f, 0.95f);
    std::vector<std::vector<float>> want_S = S;
    std::vector<float> want_out(n_seq * hv * dv);
    for (int s = 0; s < n_seq; ++s)
      for (int h = 0; h < hv; ++h) {
        const int kh = kh_mod ? h % hk : h / (hv / hk);
        ref().gdn_step(want_S[s].data() + h * dv * dk, q.data() + (s * hk + kh) * dk, k.data() + (s * hk + kh) * dk,
                       v.data() + (s * hv + h) * dv, g[s * hv + h], beta[s * hv + h],
                       want_out.data() + (s * hv + h) * dv, dk, dv);
      }
    std::vector<float*> states;
    for (int s = 0; s < n_seq; ++s) states.push_back(put(S[s]));
    cuda::GdnDecodeArgs a{put(states), put(q), put(k), put(v), put(g), put(beta), room<float>(want_out.size()),
                          n_seq, hk, hv, dk, dv, kh_mod};
    ASSERT_EQ(cuda::gdn_decode(a, stream()), "");
    expect_close(get(a.out, want_out.size()), want_out, 2e-6, "gdn out");
    for (int s = 0; s < n_seq; ++s) expect_close(get(states[s], S[s].size()), want_S[s], 2e-6, "gdn state");
  }
}

// Gated DeltaNet over runs (prefill, summaries) and the affine algebra on the device:
//  - a state through two runs (37 tokens: more than a shared-memory chunk; and 5) equals the
//    float64 recurrence (gdn::step) and the same tokens through gdn_decode one at a time;
//  - the runs' summaries [A; B] equal gdn::summary_append in float64;
//  - a state through a summary (S A + B, cuBLAS) equals the state run through the tokens;
//  - two composed summaries equal the summary of both runs in one.
// Head sizes 64 and 16 (half a warp's lanes: the tiny hybrid test model's).
TEST_F(CudaOps, GatedDeltaNetRunsSummariesAndComposition) {
  for (const auto& [kh_mod, dk] : {std::pair{true, 64}, std::pair{false, 64}, std::pair{true, 16}, std::pair{false, 16}}) {
    const int hk = 2, hv = 4, dv = dk * 3 / 4, n1 = 37, n2 = 5, n = n1 + n2;
    auto q = random_floats(n * hk * dk, 50), k = random_floats(n * hk * dk, 51);
    for (auto* x : {&q, &k})
      for (int r = 0; r < n * hk; ++r) {
        double s2 = 0;
        for (int i = 0; i < dk; ++i) s2 += double((*x)[r * dk + i]) * (*x)[r * dk + i];
        for (int i = 0; i < dk; ++i) (*x)[r * dk + i] /= static_cast<float>(std::sqrt(s2));
      }
    const auto v = random_floats(n * hv * dv, 52), g = random_floats(n * hv, 53, -1.0f, -0.01f),
               beta = random_floats(n * hv, 54, 0.05f, 0.95f);
    const auto S0 = random_floats(hv * dv * dk, 55, -0.1f, 0.1f);
    auto kh_of = [&](int h) { return kh_mod ? h % hk : h / (hv / hk); };
    // float64 references: the state through all n tokens (outputs too), and each run's summary.
    std::vector<double> S(S0.begin(), S0.end()), out_want(static_cast<size_t>(n) * hv * dv);
    std::vector<double> sumA(2 * hv * dk * dk), sumB(2 * hv * dv * dk);
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
    for (int h = 0; h < hv; ++h)
      for (int r = 0; r < 2; ++r) gdn::summary_identity(&sumA[(r * hv + h) * dk * dk], &sumB[(r * hv + h) * dv * dk], dk, dv);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < hv; ++h) {
        const int r = t < n1 ? 0 : 1, kh = kh_of(h);
        const double* kt = &kd[(t * hk + kh) * dk];
        gdn::step(&S[h * dv * dk], &qd[(t * hk + kh) * dk], kt, &vd[(t * hv + h) * dv], double(g[t * hv + h]),
                  double(beta[t * hv + h]), &out_want[(t * hv + h) * dv], dk, dv);
        gdn::summary_append(&sumA[(r * hv + h) * dk * dk], &sumB[(r * hv + h) * dv * dk], kt, &vd[(t * hv + h) * dv],
                            double(g[t * hv + h]), double(beta[t * hv + h]), dk, dv);
      }
    auto as_float = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    const std::vector<int32_t> first = {0, n1, n};
    float* dq = put(q);
    float* dk_ = put(k);
    float* dv_ = put(v);
    float* dg = put(g);
    float* db = put(beta);
    // The state through both runs, one after the other (a run each call: one matrix).
    float* st = put(S0);
    float* out = room<float>(static_cast<size_t>(n) * hv * dv);
    for (int r = 0; r < 2; ++r) {
      cuda::GdnRunsArgs a{put(std::vector<float*>{st}), put(std::vector<int32_t>{first[r], first[r + 1]}), dq, dk_, dv_,
                          dg, db, out, 1, hk, hv, dk, dv, 0, kh_mod};
      ASSERT_EQ(cuda::gdn_runs(a, stream()), "");
    }
    const auto S_run = get(st, S0.size());
    expect_close(S_run, as_float(S), 2e-5, "gdn_runs state");
    expect_close(get(out, out_want.size()), as_float(out_want), 2e-5, "gdn_runs outputs");
    // The same tokens through gdn_decode (head sizes in whole warps), one token per call.
    float* st2 = put(S0);
    float* o2 = room<float>(static_cast<size_t>(hv) * dv);
    float* const* st2p = put(std::vector<float*>{st2});
    for (int t = 0; t < n && dk % 32 == 0; ++t) {
      cuda::GdnDecodeArgs a{st2p, dq + t * hk * dk, dk_ + t * hk * dk, dv_ + t * hv * dv, dg + t * hv, db + t * hv, o2,
                            1, hk, hv, dk, dv, kh_mod};
      ASSERT_EQ(cuda::gdn_decode(a, stream()), "");
    }
    if (dk % 32 == 0) expect_close(get(st2, S0.size()), S_run, 1e-6, "gdn_runs vs gdn_decode");
    // Both runs' summaries at once, [A; B] per head, from the identity.
    const int64_t per_head = int64_t{dk + dv} * dk;
    std::vector<float> ident(static_cast<size_t>(hv * per_head), 0.0f);
    for (int h = 0; h < hv; ++h)
      for (int i = 0; i < dk; ++i) ident[static_cast<size_t>(h * per_head + i * dk + i)] = 1.0f;
    float* m1 = put(ident);
    float* m2 = put(ident);
    cuda::GdnRunsArgs sa{put(std::vector<float*>{m1, m2}), put(first), nullptr, dk_, dv_, dg, db, nullptr, 2, hk, hv,
                         dk, dv, dk, kh_mod};
    ASSERT_EQ(cuda::gdn_runs(sa, stream()), "");
    for (int r = 0; r < 2; ++r) {
      const auto got = get(r == 0 ? m1 : m2, ident.size());
      std::vector<float> gotA, gotB, wantA, wantB;
      for (int h = 0; h < hv; ++h) {
        gotA.insert(gotA.end(), got.begin() + h * per_head, got.begin() + h * per_head + dk * dk);
        gotB.insert(gotB.end(), got.begin() + h * per_head + dk * dk, got.begin() + (h + 1) * per_head);
        wantA.insert(wantA.end(), sumA.begin() + (r * hv + h) * dk * dk, sumA.begin() + (r * hv + h + 1) * dk * dk);
        wantB.insert(wantB.end(), sumB.begin() + (r * hv + h) * dv * dk, sumB.begin() + (r * hv + h + 1) * dv * dk);
      }
      expect_close(gotA, wantA, 2e-5, "summary A, run " + std::to_string(r));
      expect_close(gotB, wantB, 2e-5, "summary B, run " + std::to_string(r));
    }
    // S0 through summary 1 then summary 2 (S A + B per head) = S0 through the tokens.
    float* s1 = room<float>(S0.size());
    float* s2 = room<float>(S0.size());
    float* s0 = put(S0);
    for (auto [x, m, o] : {std::tuple{s0, m1, s1}, std::tuple{s1, m2, s2}})
      ASSERT_TRUE(cuda_affine_f32_batched(*dev_, x, m, m + dk * dk, o, dv, dk, dk, int64_t{dv} * dk, per_head, per_head,
                                          int64_t{dv} * dk, hv)
                      .ok());
    expect_close(get(s2, S0.size()), S_run, 1e-4, "state through summaries");
    // Composition: (A1 A2, B1 A2 + B2) = the summary of all n tokens in one run.
    float* c = room<float>(ident.size());
    ASSERT_TRUE(cuda_affine_f32_batched(*dev_, m1, m2, nullptr, c, dk, dk, dk, per_head, per_head, 0, per_head, hv).ok());
    ASSERT_TRUE(cuda_affine_f32_batched(*dev_, m1 + dk * dk, m2, m2 + dk * dk, c + dk * dk, dv, dk, dk, per_head,
                                        per_head, per_head, per_head, hv)
                    .ok());
    float* whole = put(ident);
    cuda::GdnRunsArgs wa{put(std::vector<float*>{whole}), put(std::vector<int32_t>{0, n}), nullptr, dk_, dv_, dg, db,
                         nullptr, 1, hk, hv, dk, dv, dk, kh_mod};
    ASSERT_EQ(cuda::gdn_runs(wa, stream()), "");
    expect_close(get(c, ident.size()), get(whole, ident.size()), 1e-4, "composed summaries");
  }
}

// Gated DeltaNet's small ops against the CPU's: the causal conv with carried inputs (the CPU
// kernel table's gdn_conv), the L2 norm (gdn::l2_normalize), the gates (the formula of
// engine/model_runner_linear.cpp, in double), and the query scale.
TEST_F(CudaOps, GatedDeltaNetSmallOps) {
  const int n = 5, C = 192, K = 4;
  const auto prev = random_floats((K - 1) * C, 70), x = random_floats(n * C, 71), w = random_floats(K * C, 72);
  std::vector<float> want(n * C);
  ref().gdn_conv(prev.data(), x.data(), n, w.data(), C, K, want.data());
  float* y = room<float>(n * C);
  ASSERT_EQ(cuda::gdn_conv(put(prev), put(x), n, put(w), C, K, y, stream()), "");
  expect_close(get(y, n * C), want, 1e-6, "gdn_conv");

  const int rows = 6, dk = 128;
  auto q = random_floats(rows * dk, 73);
  // An all-zero row: divided by eps, it stays zero (no NaN).
  std::fill(q.begin() + 5 * dk, q.begin() + 6 * dk, 0.0f);
  std::vector<float> wq = q;
  for (int r = 0; r < rows; ++r) gdn::l2_normalize(wq.data() + r * dk, dk, 1e-6f);
  float* dq = put(q);
  ASSERT_EQ(cuda::l2norm_rows(dq, rows, dk, 1e-6f, stream()), "");
  expect_close(get(dq, rows * dk), wq, 1e-6, "l2norm_rows");

  const int T = 3, hv = 32;
  const auto alpha = random_floats(T * hv, 74, -30, 30), b = random_floats(T * hv, 75, -8, 8),
             dt_bias = random_floats(hv, 76), ssm_a = random_floats(hv, 77, -5, -0.1f);
  std::vector<float> wg(T * hv), wb(T * hv);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < hv; ++h) {
      const double a = double(alpha[t * hv + h]) + dt_bias[h];
      wg[t * hv + h] = static_cast<float>(ssm_a[h] * (a > 20 ? a : std::log1p(std::exp(a))));
      wb[t * hv + h] = static_cast<float>(1.0 / (1.0 + std::exp(-double(b[t * hv + h]))));
    }
  float *g = room<float>(T * hv), *beta = room<float>(T * hv);
  ASSERT_EQ(cuda::gdn_gates(put(alpha), put(b), put(dt_bias), put(ssm_a), T, hv, g, beta, stream()), "");
  expect_close(get(g, T * hv), wg, 1e-6, "gdn_gates g");
  expect_close(get(beta, T * hv), wb, 1e-6, "gdn_gates beta");

  auto v = random_floats(100, 78);
  float* dv = put(v);
  ASSERT_EQ(cuda::scale(dv, 100, 0.125f, stream()), "");
  for (float& e : v) e *= 0.125f;
  expect_close(get(dv, 100), v, 0, "scale");
}

// A block's bookkeeping ops (engine/cuda_linear.h), against their definitions: the input
// window moved on by fewer and by more rows than it keeps, and in place; summaries reset to the
// identity map; a convolution's rows cut into q, k and v (q dropped too).
TEST_F(CudaOps, GatedDeltaNetBlockOps) {
  const int keep = 3, C = 300;
  for (const int n : {1, 2, 3, 7}) {
    const auto tail = random_floats(keep * C, 80 + n), x = random_floats(n * C, 90 + n);
    std::vector<float> all(tail);
    all.insert(all.end(), x.begin(), x.end());
    const std::vector<float> want(all.end() - keep * C, all.end());
    float* dt = put(tail);
    ASSERT_EQ(cuda::shift_rows(dt, keep, put(x), n, C, stream()), "");
    expect_close(get(dt, keep * C), want, 0, "shift_rows by " + std::to_string(n));
  }
  const int heads = 3, dk = 16, dv = 16;
  float* m = put(random_floats(heads * (dk + dv) * dk, 99));
  ASSERT_EQ(cuda::gdn_summary_reset(m, heads, dk, dv, stream()), "");
  std::vector<float> ident(static_cast<size_t>(heads * (dk + dv) * dk), 0.0f);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < dk; ++i) ident[static_cast<size_t>(h * (dk + dv) * dk + i * dk + i)] = 1.0f;
  expect_close(get(m, ident.size()), ident, 0, "gdn_summary_reset");
  const int rows = 5, kd = 32, vd = 64, width = 2 * kd + vd;
  const auto y = random_floats(rows * width, 100);
  std::vector<float> wq, wk, wv;
  for (int r = 0; r < rows; ++r) {
    wq.insert(wq.end(), y.begin() + r * width, y.begin() + r * width + kd);
    wk.insert(wk.end(), y.begin() + r * width + kd, y.begin() + r * width + 2 * kd);
    wv.insert(wv.end(), y.begin() + r * width + 2 * kd, y.begin() + (r + 1) * width);
  }
  float *q = room<float>(wq.size()), *k = room<float>(wk.size()), *v = room<float>(wv.size());
  float* dy = put(y);
  ASSERT_EQ(cuda::split_qkv(dy, rows, kd, vd, q, k, v, stream()), "");
  expect_close(get(q, wq.size()), wq, 0, "split_qkv q");
  expect_close(get(k, wk.size()), wk, 0, "split_qkv k");
  expect_close(get(v, wv.size()), wv, 0, "split_qkv v");
  float* k2 = room<float>(wk.size());
  ASSERT_EQ(cuda::split_qkv(dy, rows, kd, vd, nullptr, k2, v, stream()), "");
  expect_close(get(k2, wk.size()), wk, 0, "split_qkv without q");

  // The per-sequence ops of a step on slots: three sequences of 4, 1 and 2 rows in slots 2, 0
  // and 1 (slots of 1000 floats, the tail part at 100), against the CPU's conv per sequence and
  // the shift above; then rows copied into slots.
  const int K = keep + 1, n_rows = 7;
  const std::vector<int32_t> first = {0, 4, 5, 7}, slot = {2, 0, 1}, row_seq = {0, 0, 0, 0, 1, 2, 2};
  const int64_t slot_floats = 100 + keep * C + 50, tail_at = 100;
  auto slots = random_floats(static_cast<int>(3 * slot_floats), 110);
  const auto xs = random_floats(n_rows * C, 111), w = random_floats(K * C, 112);
  std::vector<float> want_y(n_rows * C), want_slots = slots;
  for (int r = 0; r < 3; ++r) {
    const float* prev = slots.data() + slot[r] * slot_floats + tail_at;
    const int n = first[r + 1] - first[r];
    ref().gdn_conv(prev, xs.data() + first[r] * C, n, w.data(), C, K, want_y.data() + first[r] * C);
    std::vector<float> all(prev, prev + keep * C);
    all.insert(all.end(), xs.begin() + first[r] * C, xs.begin() + first[r + 1] * C);
    std::copy(all.end() - keep * C, all.end(), want_slots.begin() + slot[r] * slot_floats + tail_at);
  }
  float* dslots = put(slots);
  float* dx = put(xs);
  float* dyc = room<float>(n_rows * C);
  ASSERT_EQ(cuda::gdn_conv_slots(dx, n_rows, put(row_seq), put(first), put(slot), dslots, slot_floats, tail_at, put(w), C,
                                 K, dyc, stream()),
            "");
  expect_close(get(dyc, n_rows * C), want_y, 1e-6, "gdn_conv_slots");
  ASSERT_EQ(cuda::shift_rows_slots(dslots, slot_floats, tail_at, put(slot), put(first), 3, keep, dx, C, stream()), "");
  expect_close(get(dslots, want_slots.size()), want_slots, 0, "shift_rows_slots");
  const std::vector<cuda::SlotRow> moves = {{6, 1, 0}, {0, 2, 3}, {4, 0, 1}};
  const int at = 10, row_width = 20;
  for (const cuda::SlotRow& mv : moves)
    std::copy_n(xs.begin() + mv.src_row * row_width, row_width,
                want_slots.begin() + mv.slot * slot_floats + at + mv.dst_row * row_width);
  ASSERT_EQ(cuda::rows_to_slots(dx, row_width, put(moves), 3, dslots, slot_floats, at, stream()), "");
  expect_close(get(dslots, want_slots.size()), want_slots, 0, "rows_to_slots");
}

TEST_F(CudaOps, ArgmaxTiesAndNaN) {
  const int n = 5000;
  std::vector<float> logits(3 * n, 0.0f);
  logits[0 * n + 4000] = 3.0f;
  logits[0 * n + 17] = 3.0f;  // a tie: the lower index wins
  logits[1 * n + 4999] = 1.0f;
  logits[1 * n + 2] = std::nanf("");  // NaN never wins
  for (int i = 0; i < n; ++i) logits[2 * n + i] = -static_cast<float>(i);  // the first
  int32_t* out = room<int32_t>(3);
  ASSERT_EQ(cuda::argmax(put(logits), 3, n, out, stream()), "");
  EXPECT_EQ(get(out, 3), (std::vector<int32_t>{17, 4999, 0}));
}

// Device sampling against the CPU Sampler at the same draw u: greedy rows (with ties), and
// temperature rows over every filter, with runs of equal logits at the top-k boundary (the
// radix select's ties) and -inf entries. Exact: the picks differ only if u lands within an
// exponential's last bit of a boundary, which these seeds do not.
TEST_F(CudaOps, SampleRowsMatchesTheCpuSampler) {
  const int n = 5000;
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<float> logits;
  std::vector<cuda::SampleRow> rows;
  std::vector<SamplingParams> params;
  const float temps[] = {0.0f, 0.7f, 1.0f, 1.5f};
  const int top_ks[] = {1, 5, 40, 256};
  const float top_ps[] = {1.0f, 0.9f, 0.5f};
  const float min_ps[] = {0.0f, 0.05f};
  int r = 0;
  for (float t : temps)
    for (int k : top_ks)
      for (float tp : top_ps)
        for (float mp : min_ps) {
          std::vector<float> row(n);
          for (float& x : row) x = nd(rng);
          if (r % 3 == 1) {  // a run of ties around the k-th largest
            std::vector<float> sorted = row;
            std::sort(sorted.begin(), sorted.end(), std::greater<float>());
            const float at = sorted[static_cast<size_t>(std::min(k, n) - 1)];
            for (int i = 0; i < n; i += 7) row[static_cast<size_t>(i)] = at;
          }
          if (r % 5 == 2)
            for (int i = 0; i < n; i += 3) row[static_cast<size_t>(i)] = -INFINITY;
          logits.insert(logits.end(), row.begin(), row.end());
          SamplingParams sp;
          sp.temperature = t;
          sp.top_k = k;
          sp.top_p = tp;
          sp.min_p = mp;
          params.push_back(sp);
          rows.push_back({t, tp, mp, k, ud(rng), r});
          ++r;
        }
  int32_t* out = room<int32_t>(rows.size());
  ASSERT_EQ(cuda::sample_rows(put(logits), r, n, put(rows), r, out, stream()), "");
  const auto got = get(out, rows.size());
  int mismatches = 0;
  for (int i = 0; i < r; ++i) {
    Sampler cpu(params[static_cast<size_t>(i)]);
    const std::span<const float> row(logits.data() + static_cast<size_t>(i) * n, n);
    const TokenId want = cpu.sample_at(row, {}, rows[static_cast<size_t>(i)].u);
    if (got[static_cast<size_t>(i)] != want) {
      ++mismatches;
      ADD_FAILURE() << "row " << i << " (T " << params[static_cast<size_t>(i)].temperature << ", top_k "
                    << params[static_cast<size_t>(i)].top_k << ", top_p " << params[static_cast<size_t>(i)].top_p
                    << ", min_p " << params[static_cast<size_t>(i)].min_p << ", u " << rows[static_cast<size_t>(i)].u
                    << "): device " << got[static_cast<size_t>(i)] << ", CPU " << want;
    }
  }
  std::printf("  sample_rows: %d of %d rows differ from the CPU sampler\n", mismatches, r);
  // A row outside the logits gives -1.
  std::vector<cuda::SampleRow> bad = {{0.0f, 1.0f, 0.0f, 1, 0.0, 7}};
  ASSERT_EQ(cuda::sample_rows(put(logits), 2, n, put(bad), 1, out, stream()), "");
  EXPECT_EQ(get(out, 1)[0], -1);
}

TEST_F(CudaOps, RowsToBf16GathersTheRowsAskedFor) {
  const int cols = 300;
  const auto x = random_floats(5 * cols, 61);
  const std::vector<int32_t> rows = {4, 0, 4};
  bf16_bits* y = room<bf16_bits>(rows.size() * cols);
  ASSERT_EQ(cuda::rows_to_bf16(put(x), put(rows), 3, cols, y, stream()), "");
  const auto got = get(y, rows.size() * cols);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int c = 0; c < cols; ++c)
      ASSERT_EQ(got[i * cols + c], f32_to_bf16(x[static_cast<size_t>(rows[i]) * cols + c])) << i << " " << c;
}

// The Q8_0 GEMV against the CPU's dequantized rows times x in double, for 1..4 input rows, on
// padded rows (the kernel must use row_bytes).
TEST_F(CudaOps, GemvQ8_0MatchesTheDequantizedProduct) {
  std::mt19937 rng(71);
  const int64_t m = 77, k = 320;
  const int64_t row_bytes = k / 32 * 34 + 6;
  std::vector<uint8_t> raw(static_cast<size_t>(m * row_bytes));
  for (auto& b : raw) b = static_cast<uint8_t>(rng());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < k / 32; ++b) {
      const uint16_t h = static_cast<uint16_t>(0x2000 + rng() % 0x1000);  // moderate positive f16 scales
      std::memcpy(&raw[static_cast<size_t>(r * row_bytes + b * 34)], &h, 2);
    }
  std::vector<float> W(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) dequantize_row(TensorType::q8_0, &raw[static_cast<size_t>(r * row_bytes)], &W[r * k], k);
  const void* dw = put(raw);
  for (int n = 1; n <= 4; ++n) {
    const auto x = random_floats(static_cast<size_t>(n * k), 72 + n);
    std::vector<float> want(static_cast<size_t>(n * m));
    for (int v = 0; v < n; ++v)
      for (int64_t r = 0; r < m; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < k; ++c) acc += double(W[r * k + c]) * x[v * k + c];
        want[v * m + r] = static_cast<float>(acc);
      }
    float* y = room<float>(want.size());
    ASSERT_EQ(cuda::gemv_q8_0(dw, row_bytes, m, k, put(x), n, y, stream()), "");
    expect_close(get(y, want.size()), want, 1e-5, "gemv_q8_0 n " + std::to_string(n));
  }
}

TEST_F(CudaOps, GatherAndScatterRows) {
  const int cols = 70;
  const auto x = random_floats(6 * cols, 81);
  const std::vector<int32_t> rows = {5, 1, 3};
  float* g = room<float>(rows.size() * cols);
  ASSERT_EQ(cuda::gather_rows(put(x), put(rows), 3, cols, g, stream()), "");
  const auto got = get(g, rows.size() * cols);
  std::vector<float> back(6 * cols, -1.0f);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int c = 0; c < cols; ++c) {
      ASSERT_EQ(got[i * cols + c], x[static_cast<size_t>(rows[i]) * cols + c]);
      back[static_cast<size_t>(rows[i]) * cols + c] = x[static_cast<size_t>(rows[i]) * cols + c];
    }
  float* y = put(std::vector<float>(6 * cols, -1.0f));
  ASSERT_EQ(cuda::scatter_rows(g, put(rows), 3, cols, y, stream()), "");
  EXPECT_EQ(get(y, 6 * cols), back);
}

TEST_F(CudaOps, CopyPages) {
  const int64_t page = 1000;
  auto pool = random_floats(6 * page, 40);
  float* d = put(pool);
  ASSERT_EQ(cuda::copy_pages(d, page, put(std::vector<int32_t>{0, 4}), put(std::vector<int32_t>{5, 1}), 2, stream()), "");
  auto want = pool;
  std::copy_n(pool.begin(), page, want.begin() + 5 * page);
  std::copy_n(pool.begin() + 4 * page, page, want.begin() + 1 * page);
  EXPECT_EQ(get(d, pool.size()), want);
}

TEST_F(CudaOps, WriteKvIntoPageSlots) {
  const int kv_stride = 256, n = 3;
  const int64_t page_stride = 16 * kv_stride + 64;  // a gap between pages stays untouched
  const std::vector<int32_t> page = {2, 0, 2}, slot = {15, 0, 3};
  const auto k = random_floats(n * kv_stride, 60), v = random_floats(n * kv_stride, 61);
  for (const bool bf16 : {false, true}) {
    const size_t pool_elems = 3 * page_stride;
    void *kp, *vp;
    if (bf16) {
      kp = put(std::vector<bf16_bits>(pool_elems, 0));
      vp = put(std::vector<bf16_bits>(pool_elems, 0));
    } else {
      kp = put(std::vector<float>(pool_elems, 0.0f));
      vp = put(std::vector<float>(pool_elems, 0.0f));
    }
    ASSERT_EQ(cuda::write_kv(kp, vp, bf16, page_stride, kv_stride, put(page), put(slot), put(k), put(v), n, stream()), "");
    auto read = [&](void* pool) {
      std::vector<float> out(pool_elems);
      if (bf16) {
        const auto b = get(static_cast<bf16_bits*>(pool), pool_elems);
        for (size_t i = 0; i < pool_elems; ++i) out[i] = bf16_to_f32(b[i]);
      } else {
        out = get(static_cast<float*>(pool), pool_elems);
      }
      return out;
    };
    const auto gk = read(kp), gv = read(vp);
    std::vector<float> wk(pool_elems, 0.0f), wv(pool_elems, 0.0f);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < kv_stride; ++i) {
        const int64_t at = page[t] * page_stride + int64_t{slot[t]} * kv_stride + i;
        wk[at] = bf16 ? bf16_to_f32(f32_to_bf16(k[t * kv_stride + i])) : k[t * kv_stride + i];
        wv[at] = bf16 ? bf16_to_f32(f32_to_bf16(v[t * kv_stride + i])) : v[t * kv_stride + i];
      }
    EXPECT_EQ(gk, wk) << (bf16 ? "bf16" : "f32");
    EXPECT_EQ(gv, wv) << (bf16 ? "bf16" : "f32");
  }
}

TEST_F(CudaOps, GemmBf16) {
  const int64_t m = 300, n = 5, k = 576;
  auto w = random_floats(m * k, 50), x = random_floats(n * k, 51);
  std::vector<bf16_bits> wb(w.size()), xb(x.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  float* dx = put(x);
  bf16_bits* dxb = room<bf16_bits>(x.size());
  ASSERT_EQ(cuda::to_bf16(dx, dxb, static_cast<int64_t>(x.size()), stream()), "");
  const auto got_xb = get(dxb, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got_xb[i], f32_to_bf16(x[i])) << "to_bf16 rounds to nearest even";
  float* y = room<float>(n * m);
  const Status s = cuda_gemm_bf16(*dev_, put(wb), dxb, y, m, n, k);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  std::vector<float> want(n * m);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < m; ++r) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += double(bf16_to_f32(wb[r * k + i])) * bf16_to_f32(got_xb[t * k + i]);
      want[t * m + r] = static_cast<float>(acc);
    }
  expect_close(get(y, n * m), want, 1e-5, "gemm");
}

// Shape checks return before any launch, so they run without a GPU.
TEST(CudaOpsShapes, BadShapesAreRefusedWithWhatAndWhere) {
  float x = 0;
  EXPECT_EQ(cuda::rmsnorm(&x, &x, &x, 1, 0, 1e-5f, nullptr), "cuda rmsnorm: n = 0 (must be 1..1048576)");
  EXPECT_NE(cuda::rope(&x, nullptr, 1, 1, 64, 65, 1, 1, false, nullptr).find("n_rot = 65"), std::string::npos);
  cuda::AttnArgs a{};
  a.head_dim = 80;
  EXPECT_NE(cuda::attention(a, nullptr).find("head_dim 80 (must be a multiple of 32"), std::string::npos);
  a.head_dim = 64;
  a.n_heads = 12;
  a.n_kv_heads = 1;
  EXPECT_NE(cuda::attention(a, nullptr).find("12 query heads over 1 KV heads"), std::string::npos);
  cuda::GdnDecodeArgs g{};
  g.dk = 128;
  g.dv = 128;
  g.n_k_heads = 3;
  g.n_v_heads = 4;
  EXPECT_NE(cuda::gdn_decode(g, nullptr).find("4 value heads over 3 key heads"), std::string::npos);
  EXPECT_NE(cuda::dequantize_rows_bf16(static_cast<int>(TensorType::q4_k), &x, 144, 1, 256, nullptr, nullptr).find("Q4_K"),
            std::string::npos);
  EXPECT_NE(cuda::dequantize_rows_bf16(static_cast<int>(TensorType::q8_0), &x, 34, 1, 33, nullptr, nullptr)
                .find("multiple of 32"),
            std::string::npos);
  EXPECT_NE(cuda::write_kv(&x, &x, false, 100, 16, nullptr, nullptr, &x, &x, 1, nullptr).find("page_stride 100"),
            std::string::npos);
  EXPECT_NE(cuda::gdn_conv(&x, &x, 1, &x, 8, 17, &x, nullptr).find("width 1..16"), std::string::npos);
  EXPECT_NE(cuda::dequantize_rows_bf16(77, &x, 34, 1, 32, nullptr, nullptr).find("unknown tensor type id 77"),
            std::string::npos);
  cuda::SampleRow sr;
  EXPECT_NE(cuda::sample_rows(&x, 1, 0, &sr, 1, nullptr, nullptr).find("rows of 0"), std::string::npos);
  a.head_dim = 80;
  EXPECT_NE(cuda::attention_tiled(a, nullptr, 1, nullptr).find("cuda attention_tiled: head_dim 80"), std::string::npos);
  EXPECT_NE(cuda::rows_to_bf16(&x, nullptr, 1, 0, nullptr, nullptr).find("1 rows of 0"), std::string::npos);
  EXPECT_NE(cuda::gemv_q8_0(&x, 340, 10, 320, &x, 5, &x, nullptr).find("n 5 (1..4"), std::string::npos);
  EXPECT_NE(cuda::gemv_q8_0(&x, 100, 10, 320, &x, 1, &x, nullptr).find("row_bytes 100 < 340"), std::string::npos);
  cuda::GdnRunsArgs r{};
  r.dk = 256;
  r.dv = 128;
  EXPECT_NE(cuda::gdn_runs(r, nullptr).find("dk 256"), std::string::npos);
  r.dk = 128;
  r.n_zero_rows = 64;
  EXPECT_NE(cuda::gdn_runs(r, nullptr).find("n_zero_rows 64"), std::string::npos);
  r.dk = 48;
  EXPECT_NE(cuda::gdn_runs(r, nullptr).find("dk 48 (16, or a multiple of 32"), std::string::npos);
  EXPECT_NE(cuda::shift_rows(&x, 16, &x, 1, 8, nullptr).find("keep 16 (0..15)"), std::string::npos);
  EXPECT_NE(cuda::gdn_summary_reset(&x, 0, 16, 16, nullptr).find("0 heads"), std::string::npos);
  EXPECT_NE(cuda::split_qkv(&x, -1, 8, 8, nullptr, &x, &x, nullptr).find("-1 rows"), std::string::npos);
  EXPECT_NE(cuda::gdn_conv_slots(&x, 1, nullptr, nullptr, nullptr, &x, 1, 0, &x, 8, 1, &x, nullptr).find("width 2..16"),
            std::string::npos);
  EXPECT_NE(cuda::shift_rows_slots(&x, 1, 0, nullptr, nullptr, 1, 3, &x, 8, nullptr).find("a null pointer"),
            std::string::npos);
  EXPECT_NE(cuda::rows_to_slots(&x, 0, nullptr, 1, &x, 1, 0, nullptr).find("1 rows of 0"), std::string::npos);
}

#else

TEST(CudaOps, NotBuilt) { GTEST_SKIP() << "this build has no CUDA targets (no nvcc at configure time)"; }

#endif

TEST(CudaDeviceTest, CreateSaysWhyNot) {
  const CudaInfo info = cuda_info();
  if (info.device_count > 0) GTEST_SKIP() << "a device exists: CudaOps covers it";
  auto d = CudaDevice::create();
  ASSERT_FALSE(d.ok());
  EXPECT_FALSE(d.error().message.empty());
}

}  // namespace
}  // namespace chorus
