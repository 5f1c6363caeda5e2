// The CPU kernel table: every op chorus runs on the CPU, as function pointers. There is one
// table per instruction set — scalar (the reference), AVX2, AVX-512 (with VNNI) — built from
// separately compiled translation units, and the device layer picks one at start-up from the
// CPU's features (device/cpu_device.h). Every table entry is tested against the scalar table
// (tests/kernels/test_kernels.cpp).
//
// Shapes use row-major [rows, cols]; "row r" of a weight matrix is output feature r.
// All functions are pure (no state), thread-safe, and work on row ranges so the caller can
// split work across threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/panel.h"
#include "kernels/cpu/quant.h"
#include "kernels/tensor_type.h"

namespace chorus {

// The rotary embedding's angles (rope_cache): pair i turns by
//   theta_i = freq_scale * pos * theta_scale^i / freq_factors[i]
// (theta_scale^i by repeated multiplication in float, llama.cpp's order). freq_factors are
// Llama 3's per-pair divisors (rope_freqs.weight; null: none). With YaRN (ext_factor > 0) a pair
// ramps from its unscaled angle (pos * theta_scale^i / freq_factors[i], pairs up to corr_lo) to
// the scaled one (from corr_hi on); cos and sin are multiplied by mscale.
struct RopeParams {
  float theta_scale = 1.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;
  float ext_factor = 0.0f;
  float corr_lo = 0.0f, corr_hi = 0.0f;
  float mscale = 1.0f;
};

// Y[t, r] = sum_k X[t, k] * W[r, k] for tokens t in [0, n_tokens) and rows r in [r0, r1).
struct GemmArgs {
  TensorType type;   // storage type of the weight rows
  const uint8_t* w;  // [n_rows, row_bytes] weight rows in their storage type
  size_t w_row_bytes;
  int64_t n_cols;     // K, a multiple of the type's block size (and of 32)
  const BlockQ8* xq;  // [n_tokens, n_cols / 32] activations quantized (integer kernels)
  const float* xf;    // [n_tokens, n_cols] activations in f32 (float kernels)
  int64_t n_tokens;
  float* y;  // [n_tokens, y_stride]
  int64_t y_stride;
  int64_t r0, r1;         // rows to compute; for a panel kernel, multiples of kPanelRows
                          // (r1 may also be the last row)
  const uint8_t* panels;  // the rows repacked (kernels/cpu/panel.h): panel kernels only
  size_t panel_bytes;
};

using GemmFn = void (*)(const GemmArgs& a);

// The activations a weight type's kernels read. Every kernel table has its kernels for a type
// read the same input, so this is a fact of the type alone.
enum class GemmInput {
  q8,   // BlockQ8 (xq): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K
  f32,  // f32 (xf): F32, F16, BF16; and gemm_f32, for every type
};
GemmInput gemm_input(TensorType type);

// Positions per KV-cache page. Attention kernels rely on it (their summation order is written
// for 16-position pages).
inline constexpr int kKvPageSize = 16;

// One block of a view as attention sees it: the block's pages, how many of its positions to
// attend (all of them for a context block; up to and including the query's own position for
// the block being written), and the queries rotated for this block. Keys are stored rotated at
// block-local positions 0..n-1; a query at view position i attending a block that starts at view
// offset o is rotated by i - o, since <rot(q, i), rot(k, o + j)> = <rot(q, i - o), rot(k, j)>.
// So no block is ever re-encoded when it appears in a view at another offset.
struct AttentionSegment {
  const float* q;               // [n_q, head_dim], rotated by (view position - segment offset)
  const float* const* k_pages;  // per page: [kv_stride dims][16 positions] (this layer)
  const float* const* v_pages;  // per page: [16 positions][kv_stride]
  int64_t n_kv;                 // positions of this block to attend
  int64_t begin = 0;            // the first of them the query sees: a sliding window hides the
                                // ones before (their scores are -inf; pages wholly before it are
                                // not read)
  // An f16 KV cache (AttentionArgs::kv_f16): the same pages as IEEE binary16, in the same layout;
  // k_pages and v_pages are then not read.
  const uint16_t* const* k_pages_f16 = nullptr;
  const uint16_t* const* v_pages_f16 = nullptr;
};

// The element type of a KV cache's pages. f32 is exact (llama.cpp's f32 set-up, to the bit); f16
// (IEEE binary16, rounded to nearest even as stored) halves the pages' bytes and the attention's
// reads, and attention over it is exactly f32 attention over the rounded keys and values.
enum class KvType : uint8_t { f32, f16 };
inline const char* kv_type_name(KvType t) {
  return t == KvType::f16 ? "f16" : "f32";
}

// The queries of one KV head (n_q of them: the query heads that share it under grouped-query
// attention) for one token, over a view of one or more blocks of a paged KV cache. Key pages
// are dimension-major: dimension i of position t is k_page[i * 16 + t] (so 16 positions' keys
// load as one vector). Value pages are position-major: v_page[t * kv_stride + i]. One softmax
// runs over all segments together; no segment is materialized and no KV is copied.
struct AttentionArgs {
  const AttentionSegment* segs;  // [n_segs], in view order
  int n_segs;
  int n_q;            // queries sharing this KV head, 1..8 (callers split larger groups)
  int64_t kv_stride;  // floats per position in a value page (n_kv_heads * head_dim)
  int64_t kv_offset;  // this head's first dimension (kv_head * head_dim)
  int head_dim;
  float scale;     // 1 / sqrt(head_dim)
  float* out;      // [n_q, head_dim]
  float* scratch;  // attention_scratch_floats(n_q, total positions, head_dim) floats,
                   // private to the calling thread
  // The step has one token and llama.cpp's bits are wanted (CpuDeviceOptions::llama_order): its
  // order for that shape. Off, one order for every batch.
  bool single_token_batch;
  bool kv_f16 = false;  // the segments' pages are f16 (k_pages_f16, v_pages_f16)
};

// Scratch an attention call needs: scores [n_q, round_up(n_kv, 16)], value accumulators
// [n_q, 4 chains, 16 lanes, head_dim], and one f16 page's keys [head_dim][16] and 256 value rows
// [256][head_dim] widened to f32.
inline int64_t attention_scratch_floats(int n_q, int64_t n_kv, int head_dim) {
  return static_cast<int64_t>(n_q) *
             (((n_kv + 15) & ~int64_t{15}) + 4 * 16 * static_cast<int64_t>(head_dim)) +
         (16 + 256) * static_cast<int64_t>(head_dim);
}

struct CpuKernels {
  const char* isa;  // "scalar", "avx2", "avx512"

  // x [n] -> blocks [n / 32]. REQUIRES: n % 32 == 0.
  void (*quantize_q8)(const float* x, BlockQ8* out, int64_t n);
  // Matrix products by weight type id, reading the activations gemm_input(type) names; nullptr
  // where the table has no kernel for the type (gemm_for() then falls back to gemm_f32).
  GemmFn gemm[40];
  // The same products from weight panels (kernels/cpu/panel.h), bit-identical to the scalar
  // table's gemm[type]; nullptr where the table reads the rows (the scalar table, the types
  // without panels). The scalar table's Q4_0, Q4_1 and Q8_0 gemm[] are the panels' order too.
  GemmFn gemm_panels[40];
  // Q4_0, Q4_1 and Q8_0 from their rows in llama.cpp's order of operations (8-lane float chains
  // per row and token, then a horizontal sum), which keeps logits bit-identical to llama.cpp's:
  // what CpuDeviceOptions::llama_order runs instead of their panels. nullptr for other types.
  GemmFn gemm_llama[40];
  // Any dequantizable type against f32 activations (xf): rows are dequantized, then f32 dot
  // products. No activation quantization: the exact-arithmetic path (f32 models, and runners
  // asked for f32 activations).
  GemmFn gemm_f32;

  // y = x / rms(x) * w, over n values. eps added to the mean square.
  void (*rmsnorm)(const float* x, const float* w, float* y, int64_t n, float eps);
  // Rotary embedding. rope_cache fills cs [n_rot] with (cos, sin) of the angles of RopeParams,
  // i < n_rot/2, for one position; rope rotates one head vector in place: pairs (2i, 2i+1)
  // (neox = false) or (i, i + n_rot/2) (neox = true).
  void (*rope_cache)(float* cs, int n_rot, const RopeParams& p, float pos);
  void (*rope)(float* x, int n_rot, const float* cs, bool neox);
  // out = silu(gate) * up, n values.
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
  // out = gelu(gate) * up, n values (GELU as llama.cpp's f16 table gives it, kernels/cpu/gelu.h).
  void (*geglu)(const float* gate, const float* up, float* out, int64_t n);
  // In-place softmax of n values.
  void (*softmax)(float* x, int64_t n);
  void (*attention)(const AttentionArgs& a);
  // y += x, n values.
  void (*add)(float* y, const float* x, int64_t n);
  // sum a[i] b[i] in the order of ggml's f32 dot product (AVX-512 build): used where llama.cpp
  // multiplies f32 weights (MoE router, shared-expert gate) and in the Gated DeltaNet ops.
  float (*dot_f32)(const float* a, const float* b, int n);

  // Gated DeltaNet (kernels/cpu/gdn.h has the reference, in any precision, and the algebra).
  // One token on a head's state S [dv][dk]: S <- exp(g) S + beta (v - exp(g) S k) k^T, then
  // out [dv] = S q if out != nullptr. v == nullptr means v = 0 (a summary's A: dv == dk).
  void (*gdn_step)(float* S, const float* q, const float* k, const float* v, float g, float beta, float* out,
                   int dk, int dv);
  // C [m][dk] (+)= X [m][dk] A [dk][dk]: a state or summary times a summary's A.
  void (*gdn_mul_right)(const float* X, const float* A, float* C, int m, int dk, bool accumulate);
  // Causal depthwise convolution then SiLU: y [n][C] from x [n][C] and the K-1 inputs before it,
  // prev [K-1][C], with taps w [K][C] (tap j multiplies the input K-1-j positions back).
  void (*gdn_conv)(const float* prev, const float* x, int n, const float* w, int C, int K, float* y);
  // A query through a dense summary: c [dk] += B y, then y <- A y (tmp: dk floats). With
  // A == nullptr only c += B y (a state read with a query).
  void (*gdn_query_dense)(const float* A, const float* B, float* y, float* c, float* tmp, int dk);
};

const CpuKernels& cpu_kernels_scalar();
const CpuKernels* cpu_kernels_avx2();    // nullptr when not built for this architecture
const CpuKernels* cpu_kernels_avx512();  // nullptr when not built for this architecture

// The kernel for `type` in table `k` (its panel kernel when `panels` and the table has one);
// falls back to k.gemm_f32, or nullptr if the type cannot be dequantized at all.
GemmFn gemm_for(const CpuKernels& k, TensorType type, bool panels = false);

// The scalar table's gemm_f32: dequantizes each weight row, then plain f32 dot products.
void gemm_dequantized(const GemmArgs& a);

}  // namespace chorus
