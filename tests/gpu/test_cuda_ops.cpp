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

#include "device/cuda_device.h"
#include "device/cuda_info.h"
#include "engine/forward/sampler.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp16.h"

#ifdef CHORUS_HAVE_CUDA
#include "kernels/cuda/ops.h"
#include "tests/support/cuda_ops_fixture.h"
#endif

namespace chorus {
namespace {

#ifdef CHORUS_HAVE_CUDA

using cuda::bf16_bits;
using namespace cuda_ops_test;

TEST_F(CudaOps, RmsNorm) {
  const int rows = 3, n = 576;
  const auto x = random_floats(rows * n, 1), w = random_floats(n, 2, 0.5f, 1.5f);
  std::vector<float> want(rows * n);
  for (int r = 0; r < rows; ++r) ref().rmsnorm(x.data() + r * n, w.data(), want.data() + r * n, n, 1e-5f);
  float* y = room<float>(rows * n);
  ASSERT_EQ(cuda::rmsnorm(put(x), put(w), y, rows, n, 1e-5f, stream()).message(), "");
  expect_close(get(y, rows * n), want, 2e-6, "rmsnorm");
  float* inplace = put(x);  // y = x, as the q/k norms run
  ASSERT_EQ(cuda::rmsnorm(inplace, put(w), inplace, rows, n, 1e-5f, stream()).message(), "");
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
        ref().rope_cache(cs.data(), n_rot, RopeParams{theta_scale, 1.0f}, static_cast<float>(pos[t]));
        for (int h = 0; h < n_heads; ++h)
          ref().rope(want.data() + (t * n_heads + h) * head_dim, n_rot, cs.data(), neox);
      }
      float* dx = put(x);
      ASSERT_EQ(
          cuda::rope(dx, put(pos), n_tokens, n_heads, head_dim, n_rot, theta_scale, 1.0f, neox, stream())
              .message(),
          "");
      expect_close(get(dx, x.size()), want, 1e-6, neox ? "rope neox" : "rope");
    }
}

TEST_F(CudaOps, SwigluAndAdd) {
  const int n = 1000;
  const auto g = random_floats(n, 4, -6, 6), u = random_floats(n, 5);
  std::vector<float> want(n);
  ref().swiglu(g.data(), u.data(), want.data(), n);
  float* out = room<float>(n);
  ASSERT_EQ(cuda::swiglu(put(g), put(u), out, n, stream()).message(), "");
  expect_close(get(out, n), want, 1e-6, "swiglu");
  float* dg = put(g);  // out = gate, as the feed-forward runs
  ASSERT_EQ(cuda::swiglu(dg, put(u), dg, n, stream()).message(), "");
  expect_close(get(dg, n), want, 1e-6, "swiglu in place");
  std::vector<float> y = u;
  ref().add(y.data(), g.data(), n);
  float* dy = put(u);
  ASSERT_EQ(cuda::add(dy, put(g), n, stream()).message(), "");
  expect_close(get(dy, n), y, 0, "add");
  // A bias on every row: 3 rows of 7 (a length that fills no warp).
  const int64_t rows = 3, cols = 7;
  std::vector<float> yb(u.begin(), u.begin() + rows * cols), bias(g.begin(), g.begin() + cols);
  float* dyb = put(yb);
  for (int64_t r = 0; r < rows; ++r) ref().add(yb.data() + r * cols, bias.data(), cols);
  ASSERT_EQ(cuda::add_rows(dyb, put(bias), rows, cols, stream()).message(), "");
  expect_close(get(dyb, rows * cols), yb, 0, "add_rows");
  EXPECT_NE(cuda::add_rows(dyb, put(bias), rows, 0, stream()).message(), "") << "no columns: a shape error";
}

// Attention output gates, as the CPU runner does them (engine/forward/cpu/cpu_runner.cpp): attn_q's rows
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
  ASSERT_EQ(cuda::split_query_gate(put(qg), q, g, T, H, HD, stream()).message(), "");
  expect_close(get(q, T * H * HD), want_q, 0, "split: queries");
  expect_close(get(g, T * H * HD), want_g, 0, "split: gates");
  float* y = put(out);
  ASSERT_EQ(cuda::sigmoid_mul(y, g, int64_t{T} * H * HD, stream()).message(), "");
  expect_close(get(y, T * H * HD), want_out, 1e-6, "sigmoid_mul");
  EXPECT_NE(cuda::split_query_gate(put(qg), q, g, T, 0, HD, stream()).message(), "")
      << "no heads: a shape error";
}

TEST_F(CudaOps, EmbedRowsAndBadIds) {
  const int rows = 10, dim = 96;
  std::vector<bf16_bits> table(rows * dim);
  const auto vals = random_floats(table.size(), 6);
  for (size_t i = 0; i < table.size(); ++i) table[i] = f32_to_bf16(vals[i]);
  const std::vector<int32_t> ids = {3, 0, 9, -1, 10};
  float* out = room<float>(ids.size() * dim);
  ASSERT_EQ(cuda::embed_rows(put(table), rows, put(ids), static_cast<int>(ids.size()), dim, out, stream())
                .message(),
            "");
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
  for (const TensorType type :
       {TensorType::q8_0, TensorType::q4_0, TensorType::q4_1, TensorType::q5_0, TensorType::q5_1,
        TensorType::q4_k, TensorType::q5_k, TensorType::q6_k, TensorType::q2_k, TensorType::q3_k,
        TensorType::iq4_nl, TensorType::iq4_xs, TensorType::f16, TensorType::f32, TensorType::bf16}) {
    const TensorTypeInfo& info = tensor_type_info(type);
    const int64_t rows = 5, cols = 512;                         // two K-quant blocks a row
    const size_t row_bytes = tensor_row_bytes(info, cols) + 4;  // padded: the kernel must use row_bytes
    std::vector<uint8_t> raw(rows * row_bytes);
    for (auto& b : raw) b = static_cast<uint8_t>(rng());
    // Keep the scales (and every f16/f32/bf16 value) finite and moderate: f16 0x3c00-ish, either
    // sign (a negative scale times a zero quant gives -0, which Q5_0's + 0 turns into +0).
    auto moderate_f16 = [&](uint8_t* p) {
      const auto h = static_cast<uint16_t>((0x2000 + rng() % 0x2000) | (rng() & 1) << 15);  // |x| ~0.008 .. 2
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
      } else {  // each block's f16 scales (and mins); the quants stay random
        const bool min = type == TensorType::q4_1 || type == TensorType::q5_1 || type == TensorType::q4_k ||
                         type == TensorType::q5_k;
        // Where each layout keeps its f16 scale: first, except Q6_K, Q3_K and Q2_K (d, dmin at 80).
        const size_t at = type == TensorType::q6_k   ? 208
                          : type == TensorType::q3_k ? 108
                          : type == TensorType::q2_k ? 80
                                                     : 0;
        for (int64_t b = 0; b < cols / static_cast<int64_t>(info.block_elems); ++b) {
          uint8_t* blk = row + b * info.block_bytes;
          moderate_f16(blk + at);
          if (min || type == TensorType::q2_k) moderate_f16(blk + at + 2);
        }
      }
    }
    std::vector<float> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      dequantize_row(type, raw.data() + r * row_bytes, want.data() + r * cols, cols);
    bf16_bits* dst = room<bf16_bits>(rows * cols);
    ASSERT_EQ(cuda::dequantize_rows_bf16(static_cast<int>(type), put(raw), static_cast<int64_t>(row_bytes),
                                         rows, cols, dst, stream())
                  .message(),
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
constexpr AttnCase kAttnCases[] = {
    {64, 64, false, false, 8, 2}, {256, 64, true, false, 16, 2}, {128, 128, true, true, 4, 4}};

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
    const float theta_scale = std::pow(1e6f, -2.0f / static_cast<float>(c.n_rot)),
                scale = 1.0f / std::sqrt(float(hd));
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
            for (int d = 0; d < kv_stride; ++d)
              kp_cpu[p][d * 16 + pos] = kpool[p * page_floats + pos * kv_stride + d];
        std::vector<std::vector<float>> qrot(3, std::vector<float>(nq * hd));
        std::vector<std::vector<const float*>> kptr(3), vptr(3);
        std::vector<AttentionSegment> segs(3);
        std::vector<float> cs(c.n_rot);
        for (int b = 0; b < 3; ++b) {
          ref().rope_cache(cs.data(), c.n_rot, RopeParams{theta_scale, 1.0f},
                           static_cast<float>(view_pos - offsets[b]));
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
        AttentionArgs a{segs.data(),       3,    nq,    kv_stride,
                        int64_t{kvh} * hd, hd,   scale, want.data() + (t * n_heads + kvh * nq) * hd,
                        scratch.data(),    false};
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
        dsegs.push_back(
            {static_cast<int32_t>(page_ids.size()), b == 2 ? 7 + t : block_len[b], 67 + t - offsets[b]});
        page_ids.insert(page_ids.end(), pages[b].begin(), pages[b].end());
      }
    }
    const cuda::AttnArgs a = attn_args(q, kpool, vpool, c.bf16, page_floats, kv_stride, page_ids, dsegs, toks,
                                       n_heads, n_kv_heads, hd, c.n_rot, c.neox, theta_scale);
    ASSERT_EQ(cuda::attention(a, stream()).message(), "");
    expect_close(
        get(a.out, want.size()), want, 4e-6,
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
    std::vector<int32_t> order(
        static_cast<size_t>((len_a + 15) / 16 + (len_w + 15) / 16 + (len_c + 15) / 16));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), std::mt19937(21));
    std::vector<int32_t> page_ids = order;  // A's pages, then W's, then C's
    const int32_t first_a = 0, first_w = (len_a + 15) / 16, first_c = first_w + (len_w + 15) / 16;
    auto kpool = random_floats(order.size() * page_floats, 22),
         vpool = random_floats(order.size() * page_floats, 23);
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
    cuda::AttnArgs a =
        attn_args(q, kpool, vpool, c.bf16, page_floats, kv_stride, page_ids, segs, toks, c.n_heads,
                  c.n_kv_heads, hd, c.n_rot, c.neox, std::pow(1e6f, -2.0f / static_cast<float>(c.n_rot)));
    const size_t n_out = static_cast<size_t>(n_tok) * c.n_heads * hd;
    ASSERT_EQ(cuda::attention(a, stream()).message(), "");
    const auto want = get(a.out, n_out);
    a.out = room<float>(n_out);
    ASSERT_EQ(cuda::attention_tiled(a, put(tiles), static_cast<int>(tiles.size()), stream()).message(), "");
    expect_close(get(a.out, n_out), want, 2e-6,
                 "tiled attention hd " + std::to_string(hd) + " group " +
                     std::to_string(c.n_heads / c.n_kv_heads) + (c.bf16 ? " bf16" : " f32"));
  }
}

TEST_F(CudaOps, ArgmaxTiesAndNaN) {
  const int n = 5000;
  std::vector<float> logits(3 * n, 0.0f);
  logits[0 * n + 4000] = 3.0f;
  logits[0 * n + 17] = 3.0f;  // a tie: the lower index wins
  logits[1 * n + 4999] = 1.0f;
  logits[1 * n + 2] = std::nanf("");                                       // NaN never wins
  for (int i = 0; i < n; ++i) logits[2 * n + i] = -static_cast<float>(i);  // the first
  int32_t* out = room<int32_t>(3);
  ASSERT_EQ(cuda::argmax(put(logits), 3, n, out, stream()).message(), "");
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
  ASSERT_EQ(cuda::sample_rows(put(logits), r, n, put(rows), r, out, stream()).message(), "");
  const auto got = get(out, rows.size());
  int mismatches = 0;
  for (int i = 0; i < r; ++i) {
    Sampler cpu(params[static_cast<size_t>(i)]);
    const std::span<const float> row(logits.data() + static_cast<size_t>(i) * n, n);
    const TokenId want = cpu.sample_at(row, {}, rows[static_cast<size_t>(i)].u);
    if (got[static_cast<size_t>(i)] != want) {
      ++mismatches;
      ADD_FAILURE() << "row " << i << " (T " << params[static_cast<size_t>(i)].temperature << ", top_k "
                    << params[static_cast<size_t>(i)].top_k << ", top_p "
                    << params[static_cast<size_t>(i)].top_p << ", min_p "
                    << params[static_cast<size_t>(i)].min_p << ", u " << rows[static_cast<size_t>(i)].u
                    << "): device " << got[static_cast<size_t>(i)] << ", CPU " << want;
    }
  }
  std::printf("  sample_rows: %d of %d rows differ from the CPU sampler\n", mismatches, r);
  // A row outside the logits gives -1.
  std::vector<cuda::SampleRow> bad = {{0.0f, 1.0f, 0.0f, 1, 0.0, 7}};
  ASSERT_EQ(cuda::sample_rows(put(logits), 2, n, put(bad), 1, out, stream()).message(), "");
  EXPECT_EQ(get(out, 1)[0], -1);
}

TEST_F(CudaOps, RowsToBf16GathersTheRowsAskedFor) {
  const int cols = 300;
  const auto x = random_floats(5 * cols, 61);
  const std::vector<int32_t> rows = {4, 0, 4};
  bf16_bits* y = room<bf16_bits>(rows.size() * cols);
  ASSERT_EQ(cuda::rows_to_bf16(put(x), put(rows), 3, cols, y, stream()).message(), "");
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
  for (int64_t r = 0; r < m; ++r)
    dequantize_row(TensorType::q8_0, &raw[static_cast<size_t>(r * row_bytes)], &W[r * k], k);
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
    ASSERT_EQ(cuda::gemv_q8_0(dw, row_bytes, m, k, put(x), n, y, stream()).message(), "");
    expect_close(get(y, want.size()), want, 1e-5, "gemv_q8_0 n " + std::to_string(n));
  }
}

TEST_F(CudaOps, GatherAndScatterRows) {
  const int cols = 70;
  const auto x = random_floats(6 * cols, 81);
  const std::vector<int32_t> rows = {5, 1, 3};
  float* g = room<float>(rows.size() * cols);
  ASSERT_EQ(cuda::gather_rows(put(x), put(rows), 3, cols, g, stream()).message(), "");
  const auto got = get(g, rows.size() * cols);
  std::vector<float> back(6 * cols, -1.0f);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int c = 0; c < cols; ++c) {
      ASSERT_EQ(got[i * cols + c], x[static_cast<size_t>(rows[i]) * cols + c]);
      back[static_cast<size_t>(rows[i]) * cols + c] = x[static_cast<size_t>(rows[i]) * cols + c];
    }
  float* y = put(std::vector<float>(6 * cols, -1.0f));
  ASSERT_EQ(cuda::scatter_rows(g, put(rows), 3, cols, y, stream()).message(), "");
  EXPECT_EQ(get(y, 6 * cols), back);
}

TEST_F(CudaOps, CopyPages) {
  const int64_t page = 1000;
  auto pool = random_floats(6 * page, 40);
  float* d = put(pool);
  ASSERT_EQ(
      cuda::copy_pages(d, page, put(std::vector<int32_t>{0, 4}), put(std::vector<int32_t>{5, 1}), 2, stream())
          .message(),
      "");
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
    ASSERT_EQ(cuda::write_kv(kp, vp, bf16, page_stride, kv_stride, put(page), put(slot), put(k), put(v), n,
                             stream())
                  .message(),
              "");
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
  ASSERT_EQ(cuda::to_bf16(dx, dxb, static_cast<int64_t>(x.size()), stream()).message(), "");
  const auto got_xb = get(dxb, x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(got_xb[i], f32_to_bf16(x[i])) << "to_bf16 rounds to nearest even";
  float* y = room<float>(n * m);
  const Status s = cuda_gemm_bf16(*dev_, put(wb), dxb, y, m, n, k);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  std::vector<float> want(n * m);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < m; ++r) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i)
        acc += double(bf16_to_f32(wb[r * k + i])) * bf16_to_f32(got_xb[t * k + i]);
      want[t * m + r] = static_cast<float>(acc);
    }
  expect_close(get(y, n * m), want, 1e-5, "gemm");
}

// Shape checks return before any launch, so they run without a GPU.
TEST(CudaOpsShapes, BadShapesAreRefusedWithWhatAndWhere) {
  float x = 0;
  EXPECT_EQ(cuda::rmsnorm(&x, &x, &x, 1, 0, 1e-5f, nullptr).message(),
            "cuda rmsnorm: n = 0 (must be 1..1048576)");
  EXPECT_NE(cuda::rope(&x, nullptr, 1, 1, 64, 65, 1, 1, false, nullptr).message().find("n_rot = 65"),
            std::string::npos);
  cuda::AttnArgs a{};
  a.head_dim = 80;
  EXPECT_NE(cuda::attention(a, nullptr).message().find("head_dim 80 (must be a multiple of 32"),
            std::string::npos);
  a.head_dim = 64;
  a.n_heads = 12;
  a.n_kv_heads = 1;
  EXPECT_NE(cuda::attention(a, nullptr).message().find("12 query heads over 1 KV heads"), std::string::npos);
  cuda::GdnDecodeArgs g{};
  g.dk = 128;
  g.dv = 128;
  g.n_k_heads = 3;
  g.n_v_heads = 4;
  EXPECT_NE(cuda::gdn_decode(g, nullptr).message().find("4 value heads over 3 key heads"), std::string::npos);
  EXPECT_NE(
      cuda::dequantize_rows_bf16(static_cast<int>(TensorType::iq2_xxs), &x, 66, 1, 256, nullptr, nullptr)
          .message()
          .find("IQ2_XXS has no CUDA conversion"),
      std::string::npos);
  EXPECT_NE(cuda::dequantize_rows_bf16(static_cast<int>(TensorType::q8_0), &x, 34, 1, 33, nullptr, nullptr)
                .message()
                .find("multiple of 32"),
            std::string::npos);
  EXPECT_NE(cuda::write_kv(&x, &x, false, 100, 16, nullptr, nullptr, &x, &x, 1, nullptr)
                .message()
                .find("page_stride 100"),
            std::string::npos);
  EXPECT_NE(cuda::gdn_conv(&x, &x, 1, &x, 8, 17, &x, nullptr).message().find("width 1..16"),
            std::string::npos);
  EXPECT_NE(cuda::dequantize_rows_bf16(77, &x, 34, 1, 32, nullptr, nullptr)
                .message()
                .find("unknown tensor type id 77"),
            std::string::npos);
  cuda::SampleRow sr;
  EXPECT_NE(cuda::sample_rows(&x, 1, 0, &sr, 1, nullptr, nullptr).message().find("rows of 0"),
            std::string::npos);
  a.head_dim = 80;
  EXPECT_NE(cuda::attention_tiled(a, nullptr, 1, nullptr).message().find("cuda attention_tiled: head_dim 80"),
            std::string::npos);
  EXPECT_NE(cuda::rows_to_bf16(&x, nullptr, 1, 0, nullptr, nullptr).message().find("1 rows of 0"),
            std::string::npos);
  EXPECT_NE(cuda::gemv_q8_0(&x, 340, 10, 320, &x, 5, &x, nullptr).message().find("n 5 (1..4"),
            std::string::npos);
  EXPECT_NE(cuda::gemv_q8_0(&x, 100, 10, 320, &x, 1, &x, nullptr).message().find("row_bytes 100 < 340"),
            std::string::npos);
  cuda::GdnRunsArgs r{};
  r.dk = 256;
  r.dv = 128;
  EXPECT_NE(cuda::gdn_runs(r, nullptr).message().find("dk 256"), std::string::npos);
  r.dk = 128;
  r.n_zero_rows = 64;
  EXPECT_NE(cuda::gdn_runs(r, nullptr).message().find("n_zero_rows 64"), std::string::npos);
  r.dk = 48;
  EXPECT_NE(cuda::gdn_runs(r, nullptr).message().find("dk 48 (16, or a multiple of 32"), std::string::npos);
  EXPECT_NE(cuda::shift_rows(&x, 16, &x, 1, 8, nullptr).message().find("keep 16 (0..15)"), std::string::npos);
  EXPECT_NE(cuda::gdn_summary_reset(&x, 0, 16, 16, nullptr).message().find("0 heads"), std::string::npos);
  EXPECT_NE(cuda::split_qkv(&x, -1, 8, 8, nullptr, &x, &x, nullptr).message().find("-1 rows"),
            std::string::npos);
  EXPECT_NE(cuda::gdn_conv_slots(&x, 1, nullptr, nullptr, nullptr, &x, 1, 0, &x, 8, 1, &x, nullptr)
                .message()
                .find("width 2..16"),
            std::string::npos);
  EXPECT_NE(cuda::shift_rows_slots(&x, 1, 0, nullptr, nullptr, 1, 3, &x, 8, nullptr)
                .message()
                .find("a null pointer"),
            std::string::npos);
  EXPECT_NE(cuda::rows_to_slots(&x, 0, nullptr, 1, &x, 1, 0, nullptr).message().find("1 rows of 0"),
            std::string::npos);
}

#else

TEST(CudaOps, NotBuilt) {
  GTEST_SKIP() << "this build has no CUDA targets (no nvcc at configure time)";
}

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
