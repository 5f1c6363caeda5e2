// The CUDA ops, as host launchers over device pointers. This header stays free of CUDA headers
// so plain C++ (device/, tests) can include it; streams travel as `Stream` (a cudaStream_t).
//
// Every launcher checks its shapes before it launches and returns a Status: success, or what is
// wrong and where (Errc::invalid_argument, "cuda rmsnorm: n = 0 (must be 1..1048576)"); a launch
// error comes back as Errc::internal with the CUDA error string. Launches are asynchronous on the given
// stream: an error in the kernel itself shows at the next synchronization (device/cuda_device.h checks it).
//
// Each op has the same semantics as its CPU counterpart in kernels/cpu/cpu_kernels.h, which is
// its reference (tests/gpu/test_cuda_ops.cpp compares them); the layouts differ where the GPU wants
// them to (attention pages are position-major), and say so below.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "kernels/cuda/gdn_chain_walk.h"

namespace chorus::cuda {

using Stream = void*;  // a cudaStream_t; nullptr is the default stream

// A bf16 value's bits (the upper half of a float's), so that host code needs no cuda_bf16.h.
using bf16_bits = uint16_t;

// y[r] = x[r] / rms(x[r]) * w for rows r < rows of n values each; y may be x (in place). One block per row;
// the sum of squares in float per thread, then a tree (the CPU reference sums in double: within 2e-6).
Status rmsnorm(const float* x, const float* w, float* y, int rows, int n, float eps, Stream s);

// Rotary embedding in place on x [n_tokens][n_heads][head_dim] at pos[t] (device, per token):
// angles freq_scale * pos * theta_scale^i, the power by repeated multiplication in float as the
// CPU's rope_cache; pairs (2i, 2i+1) or, neox, (i, i + n_rot/2); dims from n_rot on unchanged.
Status rope(float* x, const int32_t* pos, int n_tokens, int n_heads, int head_dim, int n_rot,
            float theta_scale, float freq_scale, bool neox, Stream s);

// out = silu(gate) * up, n values; out may be gate or up.
Status swiglu(const float* gate, const float* up, float* out, int64_t n, Stream s);
// y += x, n values.
Status add(float* y, const float* x, int64_t n, Stream s);
// y[r] += bias for each of `rows` rows of `cols` values (q/k/v biases).
Status add_rows(float* y, const float* bias, int64_t rows, int64_t cols, Stream s);

// Attention output gates (qwen35): qg [n_tokens][n_heads][2][head_dim] (each head's query, then
// its gate, as attn_q yields them) into q and gate, both [n_tokens][n_heads][head_dim].
Status split_query_gate(const float* qg, float* q, float* gate, int n_tokens, int n_heads, int head_dim,
                        Stream s);
// y *= sigmoid(g), n values (1 / (1 + e^-g) in float, as the CPU).
Status sigmoid_mul(float* y, const float* g, int64_t n, Stream s);

// out[t] = table row ids[t] (bf16 rows of `dim`) as float; an id outside [0, n_rows) gives a
// row of NaN (the caller validated ids; NaN makes a bug loud instead of reading out of bounds).
Status embed_rows(const bf16_bits* table, int64_t n_rows, const int32_t* ids, int n_ids, int dim, float* out,
                  Stream s);

// Weight rows of a GGUF type to bf16, for weights uploaded once at load. `src` holds n_rows
// rows of `n_cols` values in the GGUF type's blocks (row_bytes each); dst [n_rows][n_cols].
// Types: those bf16_conversions() names, every type the CPU dequantizes (kernels/cpu/dequant.h),
// each value the CPU's rounded to bf16; others: an error naming it.
Status dequantize_rows_bf16(int ggml_type, const void* src, int64_t row_bytes, int64_t n_rows, int64_t n_cols,
                            bf16_bits* dst, Stream s);
// Whether dequantize_rows_bf16 converts this GGUF type (a host-side check, no device needed),
// and the types it converts, for messages.
bool converts_to_bf16(int ggml_type);
std::string bf16_conversions();
// y [n][m] = x [n][k] W^T straight from GGUF Q8_0 rows (W: m rows of row_bytes, k/32 blocks of
// {f16 d; i8 q[32]}), for n = 1..4 input rows (decode of a few sequences): the dequantizing GEMV
// that reads 1.06 bytes per weight instead of a bf16 copy's 2 (chorus_cuda_step_bench measures
// it against cuBLAS on bf16). f32 accumulation; x 16-byte aligned, row_bytes even.
Status gemv_q8_0(const void* w, int64_t row_bytes, int64_t m, int64_t k, const float* x, int n, float* y,
                 Stream s);

// f32 -> bf16 (round to nearest even), n values: activations before a bf16 matrix product.
Status to_bf16(const float* x, bf16_bits* y, int64_t n, Stream s);
// y[i] = bf16(x[rows[i]]), rows of `cols` values, i < n: the rows a product needs, gathered
// (the output projection of a prefill step needs only the tokens that want logits).
Status rows_to_bf16(const float* x, const int32_t* rows, int n, int cols, bf16_bits* y, Stream s);
// y[i] = x[rows[i]] (gather) and y[rows[i]] = x[i] (scatter), rows of `cols` floats, i < n: a
// subset of a step's tokens compacted for a kernel and put back.
Status gather_rows(const float* x, const int32_t* rows, int n, int cols, float* y, Stream s);
Status scatter_rows(const float* x, const int32_t* rows, int n, int cols, float* y, Stream s);

// Paged attention over views, decode and prefill-in-context alike: one query token per row of
// `tokens`, each attending its own list of segments (blocks of its view, in view order).
//
// KV pages: one pool per layer side; page p's keys are k_pool + p * page_stride, laid out
// [16 positions][kv_stride] (position-major: a position's head loads coalesced), values the
// same in v_pool. Keys are stored rotated at block-local positions 0..n-1, as on the CPU.
//
// Query rotation: queries come unrotated (after any q-norm); for a segment the kernel rotates
// them by the segment's `q_pos` (the token's view position minus the segment's view offset)
// into shared memory, so no query is copied per segment in memory and no segment is
// materialized. One online softmax runs across all of a token's segments in one pass; the warps
// of a block split the pages and combine their partial softmax states at the end in shared
// memory (no second kernel, no merge pass).
struct AttnSegment {
  int32_t first_page;  // index into `page_ids` of this segment's first page
  int32_t n_kv;        // positions to attend (the write block: up to and including the token's own)
  int32_t q_pos;       // rotation of the query for this segment
  int32_t pad = 0;
};

struct AttnToken {
  int32_t first_seg;  // index into `segs`
  int32_t n_segs;
};

struct AttnArgs {
  const float* q;      // [n_tokens][n_heads][head_dim], unrotated
  const void* k_pool;  // float or bf16, per kv_bf16
  const void* v_pool;
  bool kv_bf16 = false;
  int64_t page_stride;      // elements from one page to the next (>= 16 * kv_stride)
  int kv_stride;            // elements per position: n_kv_heads * head_dim
  const int32_t* page_ids;  // device: pages of all segments
  const AttnSegment* segs;  // device
  const AttnToken* tokens;  // device, [n_tokens]
  int n_tokens;
  int n_heads, n_kv_heads, head_dim;  // head_dim a multiple of 32, <= 256; n_heads / n_kv_heads <= 8
  int n_rot;                          // rotary dims (<= head_dim, even)
  float theta_scale, freq_scale;
  bool neox;
  float scale;  // 1 / sqrt(head_dim)
  float* out;   // [n_tokens][n_heads][head_dim]
};
Status attention(const AttnArgs& a, Stream s);

// The same attention for prefill (the runner uses it for steps too large for a graph): tiles of
// up to 32 consecutive rows of `tokens` that attend the same pages — the same number of
// segments and, per segment, the same first_page (consecutive tokens of one sequence under one
// view: only their n_kv and q_pos differ, and the kernel reads those per row). Keys and values
// are staged in shared memory and used by every row of the tile. Same results as attention()
// up to the order of floating-point sums.
struct AttnTile {
  int32_t first_token;  // row of `tokens`
  int32_t n_tokens;     // 1..32
};
Status attention_tiled(const AttnArgs& a, const AttnTile* tiles, int n_tiles, Stream s);

// Writes the keys and values of n tokens into their page slots: token i's [kv_stride] key and
// value go to position slot[i] (0..15) of page page[i], in the layout `attention` reads (keys
// already rotated and normed by the caller). bf16 pages round to nearest even.
Status write_kv(void* k_pool, void* v_pool, bool kv_bf16, int64_t page_stride, int kv_stride,
                const int32_t* page, const int32_t* slot, const float* k, const float* v, int n, Stream s);

// x *= s, n values.
Status scale(float* x, int64_t n, float s, Stream st);

// Gated DeltaNet's small per-token ops (the layer's order: conv, L2 norms, gates, the
// recurrence, then RMSNorm(o) * silu(z) with rmsnorm and swiglu):
//
// Causal depthwise convolution then SiLU over one sequence's n tokens: y [n][C] from x [n][C]
// and the K-1 inputs before them, prev [K-1][C], with taps w [K][C] (tap j multiplies the input
// K-1-j positions back) — the CPU's gdn_conv. y must not overlap x or prev.
Status gdn_conv(const float* prev, const float* x, int n, const float* w, int C, int K, float* y, Stream s);
// x <- x / max(||x||_2, eps) for each of `rows` rows of n values, in place (q and k per head).
Status l2norm_rows(float* x, int rows, int n, float eps, Stream s);
// Per token t and value head h: g = ssm_a[h] * softplus(alpha + dt_bias[h]) (softplus(a) = a
// above 20) and beta = sigmoid(b). alpha, b, g, beta: [n_tokens][n_v_heads].
Status gdn_gates(const float* alpha, const float* b, const float* dt_bias, const float* ssm_a, int n_tokens,
                 int n_v_heads, float* g, float* beta, Stream s);
// The same from qwen3next's packed rows ba [n_tokens][n_k_heads][b x r | alpha x r], r =
// n_v_heads / n_k_heads (value head h = key head h / r, place h % r).
Status gdn_gates_packed(const float* ba, const float* dt_bias, const float* ssm_a, int n_tokens,
                        int n_v_heads, int n_k_heads, float* g, float* beta, Stream s);

// Gated DeltaNet, one token per sequence (decode), on each sequence's state
// [n_v_heads][dv][dk] (f32, in place): for v-head h with key head kh,
//   S <- e^g S;  S <- S + beta (v - S k) k^T;  out = S q
// (the CPU's gdn_step). kh = h % n_k_heads (qwen35 files) or h / (n_v_heads / n_k_heads)
// (qwen3next files): `kh_mod`. q, k: [n_seq][n_k_heads][dk] (already L2-normalised and, for q,
// scaled); v, out: [n_seq][n_v_heads][dv]; g, beta: [n_seq][n_v_heads]; states: device array of
// n_seq state pointers. dk a multiple of 32, <= 256.
struct GdnDecodeArgs {
  float* const* states;
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  float* out;
  int n_seq, n_k_heads, n_v_heads, dk, dv;
  bool kh_mod;
};
Status gdn_decode(const GdnDecodeArgs& a, Stream s);

// Gated DeltaNet over runs of tokens (prefill, and block summaries): run r's tokens
// [run_first[r], run_first[r+1]) are applied in order to its matrix mats[r], per v-head, as
// gdn_decode applies one (same arithmetic, same order: a run equals its tokens decoded one by
// one). Two kinds of matrix, per v-head [n_zero_rows + dv][dk]:
//   n_zero_rows = 0:  a state S [dv][dk]; out [n_tokens][n_v_heads][dv] = S_t q_t (out may be
//                     null: no outputs, then q may be null too);
//   n_zero_rows = dk: a summary, A [dk][dk] then B [dv][dk] (kernels/cpu/gdn.h): A's rows take
//                     value 0 (A <- A A_t), B's rows value v (B <- B A_t + B_t); out null.
// q, k: [n_tokens][n_k_heads][dk]; v: [n_tokens][n_v_heads][dv]; g, beta: [n_tokens][n_v_heads];
// key head as gdn_decode's (kh_mod). dk 16 or a multiple of 32 up to 128 (Qwen3.5 and Qwen3-Next: 128).
// A null mats[r] skips run r: no matrix, no outputs (a writer whose rows another op computes).
struct GdnRunsArgs {
  float* const* mats;        // [n_runs] device pointers
  const int32_t* run_first;  // [n_runs + 1] token ranges, device
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  float* out;
  int n_runs, n_k_heads, n_v_heads, dk, dv, n_zero_rows;
  bool kh_mod;
};
Status gdn_runs(const GdnRunsArgs& a, Stream s);

// A block's Gated DeltaNet state on the device (engine/forward/cuda/cuda_linear.h). Every op that holds a
// convolution's input window keeps at most kMaxGdnKeep rows (a kernel of width 16).
constexpr int kMaxGdnKeep = 15;
//
// tail [keep][C] <- the last `keep` rows of (tail ++ x[0..n)), in place (keep <= kMaxGdnKeep): the K-1
// inputs a causal convolution reads before the next token.
Status shift_rows(float* tail, int keep, const float* x, int n, int C, Stream s);
// Each of n_heads summaries [dk + dv][dk] (A then B, as gdn_runs's) set to the identity map:
// A = I, B = 0.
Status gdn_summary_reset(float* m, int n_heads, int dk, int dv, Stream s);
// y [n][2 kd + vd] (a convolution's [q | k | v]) into q [n][kd] (q may be null: dropped),
// k [n][kd] and v [n][vd].
Status split_qkv(const float* y, int n, int kd, int vd, float* q, float* k, float* v, Stream s);

// The same for all the sequences of a step at once, each sequence's slot named by number: a
// slot's part at offset o is base + slot * slot_floats + o. Rows are in sequence order:
// sequence r owns rows [first[r], first[r+1]) and row_seq[t] is the sequence of row t.
// gdn_conv over every sequence's rows, each with its own K-1 inputs before them (the part at
// tail_offset of its slot, [K-1][C]).
Status gdn_conv_slots(const float* x, int n, const int32_t* row_seq, const int32_t* first,
                      const int32_t* slot, const float* base, int64_t slot_floats, int64_t tail_offset,
                      const float* w, int C, int K, float* y, Stream s);
// shift_rows of each sequence's tail (the part at `offset`) by its rows of x.
Status shift_rows_slots(float* base, int64_t slot_floats, int64_t offset, const int32_t* slot,
                        const int32_t* first, int n_seqs, int keep, const float* x, int C, Stream s);
// Row src_row of src [..][width] to row dst_row of the part at `offset` of slot `slot`, for each
// of n entries (a block's appended head or compact rows).
struct SlotRow {
  int32_t src_row, slot, dst_row;
};
Status rows_to_slots(const float* src, int width, const SlotRow* rows, int n, float* base,
                     int64_t slot_floats, int64_t offset, Stream s);

// Chain reads (engine/forward/cuda/cuda_linear.h): a one-token writer whose view has a block written in the
// same step reads the view through its query instead of composing the view's state, as the
// CPU's GdnBlockOps::query_through. Per value head: y = the token's q, c = 0; y and c through
// the token's own map (y <- e^g (y - beta (k.y) k), c += beta (k.y) v), then back through each
// block of the read, last first (its buffered tokens last first, its summary: c += B y,
// y <- A y, its head tokens last first), and at the end c += S_base y when the reader has a base
// (its view's unchanging first blocks, composed into its slot's state). The output is c.
// Slots as above; `parts` are the offsets within one linear layer's part (at layer_offset) of a
// slot; blocks as gdn_chain_walk.h's GdnChainBlock.
struct GdnSlotParts {
  int64_t S, tail, base_tail, run_tail, head_x, head_g, head_b, AB, ck, cv, cg, cb;
};
constexpr int kMaxChainRows = 65535;  // gdn_chain_inputs: head rows + reads * keep (a grid's y limit)
struct GdnChainRead {
  int32_t row, slot, first_block, n_blocks, has_base;  // blocks [first_block, + n_blocks), in view order
};
struct GdnChainHead {
  int32_t read, block, j;  // head token j of blocks[block], a block of read `read`
};
struct GdnChainArgs {
  const GdnChainRead* reads;
  int n_reads;
  const GdnChainBlock* blocks;
  const GdnChainHead* heads;  // [n_heads]: head row r is heads[r]
  int n_heads;
  float* slots;
  int64_t slot_floats, layer_offset;
  GdnSlotParts parts;
  const float* conv_w;  // the layer's taps [keep + 1][C]
  int C, keep;
  float* head_y;        // [n_heads][C]: gdn_chain_inputs' output
  const float* head_k;  // [n_heads][n_k_heads][dk], [n_heads][n_v_heads][dk]: head_y split, k normalised
  const float* head_v;
  const float *q, *k, *v, *g, *beta;  // the step's rows, as gdn_runs's (g: log decay)
  float* out;                         // [rows][n_v_heads][dk]: row reads[i].row is written
  int n_k_heads, n_v_heads, dk;
  bool kh_mod;
};
// The convolution inputs of the step's chain reads: head row r gets head token j of its block
// convolved with the inputs before it (gdn_chain_source) and SiLU'd, as gdn_conv; each read's
// run tail (parts.run_tail of its slot, [keep][C]) gets the keep inputs before its token, for
// gdn_conv_slots. Reads only other parts of slots than it writes.
Status gdn_chain_inputs(const GdnChainArgs& a, Stream s);
// The reads themselves (after head_y is split into head_k and head_v, and the step's q and k
// are normalised): one block per (value head, read). Both: dk 16 or a multiple of 32 up to 128,
// value heads as wide as key heads (C = 2 kd + vd).
Status gdn_chain_read(const GdnChainArgs& a, Stream s);

// Mixture-of-experts feed-forward (engine/forward/cuda/cuda_moe.h; the CPU's moe_feed_forward):
//
// out [n][rows] = x [n][cols] W^T for an f32 W [rows][cols] (routers, kept in f32 so that the
// experts chosen are the CPU's). A warp per (input, row).
Status rows_dot_f32(const float* W, int rows, int cols, const float* x, int n, float* out, Stream s);
// Per token (logits [n][n_expert]): softmax over the experts, the n_used most probable (ties:
// the lower id) in that order, their probabilities renormalised (the sum at least 2^-14) and
// times `scale` unless it is 0 or 1: slot_expert, slot_weight [n][n_used].
constexpr int kMaxMoeExperts = 1024;
constexpr int kMaxMoeUsed = 16;
Status moe_route(const float* logits, int n, int n_expert, int n_used, float scale, int32_t* slot_expert,
                 float* slot_weight, Stream s);
// The slots (t * n_used + s) grouped by expert: expert e's are slots[first[e] .. first[e+1]),
// first [n_expert + 1]; active [1 + n_expert]: how many experts were chosen, then they, in id
// order. One block.
Status moe_sort(const int32_t* slot_expert, int n_slots, int n_expert, int32_t* first, int32_t* slots,
                int32_t* active, Stream s);
// Every chosen expert's rows over the slots that chose it (moe_sort's lists): out [slot][rows] =
// silu(W_e x) * (W2_e x) with w2, else W_e x times slot_weight[slot] when given; W, W2 bf16
// [n_expert][rows][cols]; x's row is the slot's (x_per_slot) or its token's (slot / n_used).
struct MoeExpertArgs {
  const bf16_bits* w;
  const bf16_bits* w2;  // or null
  const float* x;
  bool x_per_slot;
  const float* slot_weight;  // or null
  const int32_t* first;
  const int32_t* slots;
  const int32_t* active;
  int n_expert, n_used, n_slots, rows, cols;
  float* out;
};
Status moe_experts(const MoeExpertArgs& a, Stream s);
// x[t] += sum over slots s of slot_out[t * n_used + s] (in slot order) + sigmoid(shared_logit[t])
// * shared[t] (no shared expert: null). slot_out [n * n_used][E], shared and x [n][E].
Status moe_combine(const float* slot_out, int n, int n_used, int E, const float* shared,
                   const float* shared_logit, float* x, Stream s);

// out[r] = the index of the largest of logits[r] (n values; the lowest index among equals; NaN
// never wins).
Status argmax(const float* logits, int rows, int n, int32_t* out, Stream s);

// Sampling on the device, as the CPU Sampler (engine/forward/sampler.h) without its repetition penalty
// and forbidden tokens: temperature <= 0 is greedy (argmax, lowest id among equals); else top-k
// (1..kMaxSampleTopK, at most n) -> top-p (>= 1 off) -> min-p (<= 0 off) -> temperature -> the
// draw at u in [0, 1) (the CPU draws r = u * total), with the CPU's loops and precisions. The
// device's expf/exp may differ from the host's by an ulp or two, so a pick can differ where u,
// a top-p cumulative sum or a min-p ratio falls within that of a boundary. NaN logits rank lowest. The
// parameters are device memory, one per sample; sample i reads logits row params[i].row and writes out[i] (-1
// for a row outside [0, n_rows)); a top_k outside 1..kMaxSampleTopK is clamped into it (callers check it:
// engine/forward/sampler.h).
inline constexpr int kMaxSampleTopK = 256;
struct SampleRow {
  float temperature = 0.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 1;
  double u = 0.0;
  int32_t row = 0;
};
Status sample_rows(const float* logits, int n_rows, int n, const SampleRow* params, int n_samples,
                   int32_t* out, Stream s);

// Fills x with uniform values in [-scale, scale) from a counter hash of (seed, index): random
// weights made on the device (benchmarks need shapes, not values) without a host round trip.
Status fill_uniform_bf16(bf16_bits* x, int64_t n, uint64_t seed, float scale, Stream s);
Status fill_uniform_f32(float* x, int64_t n, uint64_t seed, float scale, Stream s);

// Copies whole pages inside one pool: page dst[i] <- page src[i], i < n (each page_floats long;
// the lists are on the device; no page appears in both lists).
Status copy_pages(float* pool, int64_t page_floats, const int32_t* src, const int32_t* dst, int n, Stream s);

}  // namespace chorus::cuda
