// chorus_cuda_step_bench: a Qwen3.5-9B-shaped decode step assembled from chorus's CUDA ops,
// with random bf16 weights generated on the device, timed with and without a CUDA graph, for
// batches of concurrent generates that each read a 3-block view (a shared 1024-token prompt, a
// shared 128-token notes block, and the generate's own block).
//
// What it is: every matrix product of the real step (cuBLAS bf16, f32 accumulation), the
// 8 attention layers' view attention (bf16 KV pages, query rotation in the kernel) and KV
// writes, the 24 Gated DeltaNet layers' recurrent update, every RMSNorm, residual add, SwiGLU,
// the output projection over the 248,320-token vocabulary and greedy sampling on the device.
// What it is not: the full model runner (issue 9 builds it on these ops). The GDN layers' L2
// norms, query scale and gates are in it; their causal conv step is not (per token it touches
// 8,192 channels x 4 taps per layer, against the 4 x 16.8 M-weight products of the same layer),
// and the conv's outputs are stood in for by fixed buffers. So the times are a floor for the
// runner's step, not its measurement.
//
// Then the dequantizing Q8_0 GEMV against cuBLAS on bf16 for the 9B shape's matrices at batch
// 1, 2, 4; and a SmolLM2-135M-shaped model through the model runners, GPU against CPU: decode
// rates, and a 4096-token prefill while 8 sequences decode (tiled prefill attention on the GPU).
//
// Prints a table and, with --json FILE, writes the numbers.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cuda_runner.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "engine/weights.h"
#include "gpu/cpu_device.h"
#include "gpu/cuda_device.h"
#include "kernels/cuda/ops.h"

namespace {

using namespace chorus;
using cuda::bf16_bits;

struct Shape {
  int hidden = 4096, layers = 32, interval = 4;        // every 4th layer is full attention
  int n_head = 16, n_kv = 4, head_dim = 256, n_rot = 64;
  int hk = 16, hv = 32, dk = 128, dv = 128;
  int ff = 12288;
  int vocab = 248320;
  int prompt = 1024, notes = 128, own = 32;            // the view: shared prompt, shared notes, own block
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "chorus_cuda_step_bench: %s\n", what.c_str());
  std::exit(1);
}
void check(const std::string& err) {
  if (!err.empty()) die(err);
}
void check(const Status& s) {
  if (!s.ok()) die(s.error().to_string());
}
template <class T>
T* alloc(CudaDevice& dev, int64_t n, const char* what) {
  auto p = dev.alloc(n * static_cast<int64_t>(sizeof(T)), what);
  if (!p) die(p.error().to_string());
  return static_cast<T*>(*p);
}

struct Matrix {
  bf16_bits* w = nullptr;
  int64_t rows = 0, cols = 0;
};

struct Layer {
  bool attention = false;
  float *norm1 = nullptr, *norm2 = nullptr;
  Matrix a, b, c, out;        // GDN: qkv, z, ba; attention: q(+gate), k, v
  Matrix gate, up, down;
};

struct Model {
  Shape s;
  std::vector<Layer> layers;
  float* out_norm = nullptr;
  Matrix output;
  float* qk_norm = nullptr;   // shared by q-norm and k-norm here (values do not matter)
};

Matrix matrix(CudaDevice& dev, int64_t rows, int64_t cols, uint64_t seed) {
  Matrix m{alloc<bf16_bits>(dev, rows * cols, "weights"), rows, cols};
  check(cuda::fill_uniform_bf16(m.w, rows * cols, seed, 0.02f, dev.stream()));
  return m;
}

float* vec(CudaDevice& dev, int64_t n, uint64_t seed, float scale = 1.0f) {
  float* p = alloc<float>(dev, n, "vector");
  check(cuda::fill_uniform_f32(p, n, seed, scale, dev.stream()));
  return p;
}

Model make_model(CudaDevice& dev, const Shape& s) {
  Model m;
  m.s = s;
  uint64_t seed = 1;
  for (int l = 0; l < s.layers; ++l) {
    Layer L;
    L.attention = (l + 1) % s.interval == 0;
    L.norm1 = vec(dev, s.hidden, seed++);
    L.norm2 = vec(dev, s.hidden, seed++);
    if (L.attention) {
      L.a = matrix(dev, 2 * s.n_head * s.head_dim, s.hidden, seed++);  // query and output gate
      L.b = matrix(dev, s.n_kv * s.head_dim, s.hidden, seed++);
      L.c = matrix(dev, s.n_kv * s.head_dim, s.hidden, seed++);
      L.out = matrix(dev, s.hidden, s.n_head * s.head_dim, seed++);
    } else {
      L.a = matrix(dev, 2 * s.hk * s.dk + s.hv * s.dv, s.hidden, seed++);  // q, k, v
      L.b = matrix(dev, s.hv * s.dv, s.hidden, seed++);                    // z
      L.c = matrix(dev, 2 * s.hv, s.hidden, seed++);                       // beta, alpha
      L.out = matrix(dev, s.hidden, s.hv * s.dv, seed++);
    }
    L.gate = matrix(dev, s.ff, s.hidden, seed++);
    L.up = matrix(dev, s.ff, s.hidden, seed++);
    L.down = matrix(dev, s.hidden, s.ff, seed++);
    m.layers.push_back(L);
  }
  m.out_norm = vec(dev, s.hidden, seed++);
  m.output = matrix(dev, s.vocab, s.hidden, seed++);
  m.qk_norm = vec(dev, s.head_dim, seed++);
  check(dev.sync("weights"));
  return m;
}

// Buffers and view tables of one batch size.
struct Batch {
  int n = 0;
  float *x, *h, *big1, *big2, *big3, *logits;
  bf16_bits* hb;
  int32_t* next;
  // Attention: KV pages per attention layer, the view tables.
  std::vector<bf16_bits*> k_pool, v_pool;
  int64_t page_stride = 0;
  int32_t *page_ids, *write_page, *write_slot;
  cuda::AttnSegment* segs;
  cuda::AttnToken* tokens;
  int32_t* pos;
  // GDN: states per layer (n sequences each), inputs.
  std::vector<float**> states;
  float *gq, *gk, *gv, *gg, *gbeta, *gout;
};

Batch make_batch(CudaDevice& dev, const Model& m, int n) {
  const Shape& s = m.s;
  Batch b;
  b.n = n;
  const int64_t widest = std::max<int64_t>({s.ff, 2 * s.n_head * s.head_dim, 2 * s.hk * s.dk + s.hv * s.dv});
  b.x = vec(dev, int64_t{n} * s.hidden, 7);
  b.h = alloc<float>(dev, int64_t{n} * s.hidden, "activations");
  b.big1 = alloc<float>(dev, n * widest, "activations");
  b.big2 = alloc<float>(dev, n * widest, "activations");
  b.big3 = alloc<float>(dev, n * widest, "activations");
  b.hb = alloc<bf16_bits>(dev, n * widest, "activations");
  b.logits = alloc<float>(dev, int64_t{n} * s.vocab, "logits");
  b.next = alloc<int32_t>(dev, n, "sampled");
  // Pages: prompt and notes shared by all, then each generate's own block.
  const int kv_stride = s.n_kv * s.head_dim;
  b.page_stride = 16 * int64_t{kv_stride};
  const int p_prompt = s.prompt / 16, p_notes = s.notes / 16, p_own = (s.own + 15) / 16;
  const int n_pages = p_prompt + p_notes + n * p_own;
  for (const Layer& L : m.layers) {
    if (!L.attention) continue;
    auto* kp = alloc<bf16_bits>(dev, n_pages * b.page_stride, "KV pages");
    auto* vp = alloc<bf16_bits>(dev, n_pages * b.page_stride, "KV pages");
    check(cuda::fill_uniform_bf16(kp, n_pages * b.page_stride, 11, 1.0f, dev.stream()));
    check(cuda::fill_uniform_bf16(vp, n_pages * b.page_stride, 12, 1.0f, dev.stream()));
    b.k_pool.push_back(kp);
    b.v_pool.push_back(vp);
  }
  std::vector<int32_t> page_ids, write_page, write_slot, pos;
  std::vector<cuda::AttnSegment> segs;
  std::vector<cuda::AttnToken> toks;
  for (int t = 0; t < n; ++t) {
    toks.push_back({static_cast<int32_t>(segs.size()), 3});
    const int view_pos = s.prompt + s.notes + s.own - 1;  // the token is the own block's last
    int32_t first = static_cast<int32_t>(page_ids.size());
    for (int p = 0; p < p_prompt; ++p) page_ids.push_back(p);
    segs.push_back({first, s.prompt, view_pos, 0});
    first = static_cast<int32_t>(page_ids.size());
    for (int p = 0; p < p_notes; ++p) page_ids.push_back(p_prompt + p);
    segs.push_back({first, s.notes, view_pos - s.prompt, 0});
    first = static_cast<int32_t>(page_ids.size());
    for (int p = 0; p < p_own; ++p) page_ids.push_back(p_prompt + p_notes + t * p_own + p);
    segs.push_back({first, s.own, s.own - 1, 0});
    write_page.push_back(p_prompt + p_notes + t * p_own + (s.own - 1) / 16);
    write_slot.push_back((s.own - 1) % 16);
    pos.push_back(s.own - 1);
  }
  auto upload = [&](const auto& v, const char* what) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    T* d = alloc<T>(dev, static_cast<int64_t>(v.size()), what);
    check(dev.upload(d, v.data(), static_cast<int64_t>(v.size() * sizeof(T))));
    return d;
  };
  b.page_ids = upload(page_ids, "view");
  b.segs = upload(segs, "view");
  b.tokens = upload(toks, "view");
  b.write_page = upload(write_page, "view");
  b.write_slot = upload(write_slot, "view");
  b.pos = upload(pos, "view");
  for (const Layer& L : m.layers) {
    if (L.attention) continue;
    std::vector<float*> st;
    for (int t = 0; t < n; ++t) st.push_back(vec(dev, int64_t{s.hv} * s.dv * s.dk, 13, 0.01f));
    b.states.push_back(upload(st, "states"));
  }
  b.gq = vec(dev, int64_t{n} * s.hk * s.dk, 14, 0.1f);
  b.gk = vec(dev, int64_t{n} * s.hk * s.dk, 15, 0.1f);
  b.gv = vec(dev, int64_t{n} * s.hv * s.dv, 16);
  b.gg = vec(dev, int64_t{n} * s.hv, 17, 0.01f);
  b.gbeta = vec(dev, int64_t{n} * s.hv, 18, 0.5f);
  b.gout = alloc<float>(dev, int64_t{n} * s.hv * s.dv, "gdn out");
  check(dev.sync("batch"));
  return b;
}

// One decode step of every sequence in the batch: only launches, on the device's stream.
void step(CudaDevice& dev, const Model& m, Batch& b) {
  const Shape& s = m.s;
  void* st = dev.stream();
  const int n = b.n;
  // x [n][cols] to bf16 once for the products that read it; then y = x W^T.
  auto stage = [&](const float* x, int64_t cols) { check(cuda::to_bf16(x, b.hb, n * cols, st)); };
  auto gemm = [&](const Matrix& w, float* y) { check(cuda_gemm_bf16(dev, w.w, b.hb, y, w.rows, n, w.cols)); };
  size_t attn_i = 0, gdn_i = 0;
  for (const Layer& L : m.layers) {
    check(cuda::rmsnorm(b.x, L.norm1, b.h, n, s.hidden, 1e-6f, st));
    if (L.attention) {
      stage(b.h, s.hidden);
      gemm(L.a, b.big1);  // q and gate
      gemm(L.b, b.big2);  // k
      gemm(L.c, b.big3);  // v
      check(cuda::rmsnorm(b.big1, m.qk_norm, b.big1, n * s.n_head, s.head_dim, 1e-6f, st));
      check(cuda::rmsnorm(b.big2, m.qk_norm, b.big2, n * s.n_kv, s.head_dim, 1e-6f, st));
      check(cuda::rope(b.big2, b.pos, n, s.n_kv, s.head_dim, s.n_rot, 0.6f, 1.0f, true, st));
      check(cuda::write_kv(b.k_pool[attn_i], b.v_pool[attn_i], true, b.page_stride, s.n_kv * s.head_dim, b.write_page,
                           b.write_slot, b.big2, b.big3, n, st));
      cuda::AttnArgs a;
      a.q = b.big1;
      a.k_pool = b.k_pool[attn_i];
      a.v_pool = b.v_pool[attn_i];
      a.kv_bf16 = true;
      a.page_stride = b.page_stride;
      a.kv_stride = s.n_kv * s.head_dim;
      a.page_ids = b.page_ids;
      a.segs = b.segs;
      a.tokens = b.tokens;
      a.n_tokens = n;
      a.n_heads = s.n_head;
      a.n_kv_heads = s.n_kv;
      a.head_dim = s.head_dim;
      a.n_rot = s.n_rot;
      a.theta_scale = 0.6f;
      a.freq_scale = 1.0f;
      a.neox = true;
      a.scale = 0.0625f;
      a.out = b.big2;
      check(cuda::attention(a, st));
      check(cuda::swiglu(b.big1, b.big2, b.big3, int64_t{n} * s.n_head * s.head_dim, st));  // the output gate
      stage(b.big3, L.out.cols);
      gemm(L.out, b.h);
      ++attn_i;
    } else {
      stage(b.h, s.hidden);
      gemm(L.a, b.big1);  // q, k, v (the conv step and L2 norms would read these)
      gemm(L.b, b.big2);  // z
      gemm(L.c, b.big3);  // beta, alpha
      check(cuda::l2norm_rows(b.gq, n * s.hk, s.dk, 1e-6f, st));
      check(cuda::l2norm_rows(b.gk, n * s.hk, s.dk, 1e-6f, st));
      check(cuda::scale(b.gq, int64_t{n} * s.hk * s.dk, 0.088f, st));
      check(cuda::gdn_gates(b.big3 + int64_t{n} * s.hv, b.big3, m.qk_norm, m.qk_norm, n, s.hv, b.gg, b.gbeta, st));
      cuda::GdnDecodeArgs g{b.states[gdn_i], b.gq, b.gk, b.gv, b.gg, b.gbeta, b.gout, n, s.hk, s.hv, s.dk, s.dv, true};
      check(cuda::gdn_decode(g, st));
      check(cuda::rmsnorm(b.gout, m.qk_norm, b.gout, n * s.hv, s.dv, 1e-6f, st));
      check(cuda::swiglu(b.big2, b.gout, b.big3, int64_t{n} * s.hv * s.dv, st));  // RMSNorm(o) * silu(z)
      stage(b.big3, L.out.cols);
      gemm(L.out, b.h);
      ++gdn_i;
    }
    check(cuda::add(b.x, b.h, int64_t{n} * s.hidden, st));
    check(cuda::rmsnorm(b.x, L.norm2, b.h, n, s.hidden, 1e-6f, st));
    stage(b.h, s.hidden);
    gemm(L.gate, b.big1);
    gemm(L.up, b.big2);
    check(cuda::swiglu(b.big1, b.big2, b.big3, int64_t{n} * s.ff, st));
    stage(b.big3, s.ff);
    gemm(L.down, b.h);
    check(cuda::add(b.x, b.h, int64_t{n} * s.hidden, st));
  }
  check(cuda::rmsnorm(b.x, m.out_norm, b.h, n, s.hidden, 1e-6f, st));
  stage(b.h, s.hidden);
  gemm(m.output, b.logits);
  check(cuda::argmax(b.logits, n, s.vocab, b.next, st));
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

// Milliseconds per step: the median of `reps` timed runs of `steps` steps each.
template <class F>
double time_steps(CudaDevice& dev, F&& run, int steps, int reps) {
  auto st = static_cast<cudaStream_t>(dev.stream());
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    cuda_ok(cudaEventRecord(a, st), "cudaEventRecord");
    for (int i = 0; i < steps; ++i) run();
    cuda_ok(cudaEventRecord(b, st), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
    ms.push_back(t / steps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// ---- The "dequantized at load, or a dequantizing GEMV for batch <= 4: measure which" ---
//
// For the 9B shape's matrices, batch 1, 2 and 4: cuBLAS on bf16 weights (what the runner does,
// weights converted at load; the activations' conversion to bf16 included) against gemv_q8_0
// reading the GGUF Q8_0 rows directly. Random bytes: the speed does not depend on the values.
std::string gemv_vs_bf16(CudaDevice& dev, int reps) {
  struct MatShape {
    const char* name;
    int64_t rows, cols;
  };
  const MatShape shapes[] = {{"ffn_up/gate", 12288, 4096}, {"ffn_down", 4096, 12288}, {"gdn_qkv", 8192, 4096},
                             {"output", 248320, 4096}};
  std::string rows;
  std::printf("\nGEMV on GGUF Q8_0 vs cuBLAS on bf16 (us per product, median of %d runs of 20)\n", reps);
  std::printf("%12s %5s | %10s %10s | %s\n", "matrix", "batch", "bf16 us", "q8_0 us", "bf16/q8_0");
  void* st = dev.stream();
  for (const MatShape& ms : shapes) {
    const int64_t mark = dev.mark();
    const int64_t row_bytes = ms.cols / 32 * 34;
    auto* wq = alloc<uint8_t>(dev, ms.rows * row_bytes, "q8_0 weights");
    check(cuda::fill_uniform_f32(reinterpret_cast<float*>(wq), ms.rows * row_bytes / 4, 21, 1.0f, st));
    auto* wb = alloc<bf16_bits>(dev, ms.rows * ms.cols, "bf16 weights");
    check(cuda::fill_uniform_bf16(wb, ms.rows * ms.cols, 22, 0.02f, st));
    float* x = vec(dev, 4 * ms.cols, 23);
    auto* xb = alloc<bf16_bits>(dev, 4 * ms.cols, "x bf16");
    float* y = alloc<float>(dev, 4 * ms.rows, "y");
    for (const int n : {1, 2, 4}) {
      auto bf16 = [&] {
        check(cuda::to_bf16(x, xb, n * ms.cols, st));
        check(cuda_gemm_bf16(dev, wb, xb, y, ms.rows, n, ms.cols));
      };
      auto q8 = [&] { check(cuda::gemv_q8_0(wq, row_bytes, ms.rows, ms.cols, x, n, y, st)); };
      bf16();
      q8();
      check(dev.sync("gemv warm-up"));
      const double t_b = 1000.0 * time_steps(dev, bf16, 20, reps), t_q = 1000.0 * time_steps(dev, q8, 20, reps);
      std::printf("%12s %5d | %10.1f %10.1f | %8.2fx\n", ms.name, n, t_b, t_q, t_b / t_q);
      char row[200];
      std::snprintf(row, sizeof row, "%s{\"matrix\": \"%s\", \"batch\": %d, \"bf16_us\": %.2f, \"q8_0_us\": %.2f}",
                    rows.empty() ? "" : ", ", ms.name, n, t_b, t_q);
      rows += row;
    }
    dev.reset_to(mark);
  }
  return rows;
}

// ---- SmolLM2-135M shapes through the model runners: the GPU path against the CPU path ----------
//
// A random-weight model of SmolLM2-135M-Instruct's shapes (Q8_0 matrices; the real file is too
// large to carry to a lent GPU machine) runs the same decode through CudaRunner and the CPU
// ModelRunner (every core of the machine): `batch` sequences of a 128-token prompt each, then
// `steps` decode steps of one token per sequence.

struct RandomModel {
  ModelConfig c;
  Weights w;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<float>> vecs;

  WeightMatrix q8(int64_t rows, int64_t cols, std::mt19937& rng) {
    const int64_t nb = cols / 32;
    std::vector<uint8_t> b(static_cast<size_t>(rows * nb * 34));
    const uint16_t scale = 0x1a0c;  // f16 ~0.0016: 0.2 / 127
    for (int64_t i = 0; i < rows * nb; ++i) {
      std::memcpy(&b[static_cast<size_t>(i * 34)], &scale, 2);
      for (int j = 0; j < 32; ++j) b[static_cast<size_t>(i * 34 + 2 + j)] = static_cast<uint8_t>(rng());
    }
    bytes.push_back(std::move(b));
    return WeightMatrix{TensorType::q8_0, rows, cols, bytes.back().data(), static_cast<size_t>(nb * 34)};
  }
  const float* ones(int64_t n) {
    vecs.emplace_back(static_cast<size_t>(n), 1.0f);
    return vecs.back().data();
  }
};

std::unique_ptr<RandomModel> smollm2_shaped() {
  auto m = std::make_unique<RandomModel>();
  ModelConfig& c = m->c;
  c.arch = "llama";
  c.name = "smollm2-135m-shaped";
  c.n_vocab = 49152;
  c.n_embd = 576;
  c.n_layer = 30;
  c.n_head = 9;
  c.n_head_kv = 3;
  c.head_dim = 64;
  c.n_ff = 1536;
  c.n_ctx_train = 8192;
  c.norm_eps = 1e-5f;
  c.rope_base = 100000.0f;
  c.n_rot = 64;
  c.tied_output = true;
  c.linear_layer.assign(30, false);
  c.kv_layer.resize(30);
  for (int l = 0; l < 30; ++l) c.kv_layer[static_cast<size_t>(l)] = l;
  c.n_kv_layer = 30;
  std::mt19937 rng(3);
  m->w.token_embd = m->q8(c.n_vocab, c.n_embd, rng);
  m->w.output = m->w.token_embd;
  m->w.output_norm = m->ones(c.n_embd);
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights L;
    L.attn_norm = m->ones(c.n_embd);
    L.ffn_norm = m->ones(c.n_embd);
    L.wq = m->q8(c.q_dim(), c.n_embd, rng);
    L.wk = m->q8(c.kv_dim(), c.n_embd, rng);
    L.wv = m->q8(c.kv_dim(), c.n_embd, rng);
    L.wo = m->q8(c.n_embd, c.q_dim(), rng);
    L.w_gate = m->q8(c.n_ff, c.n_embd, rng);
    L.w_up = m->q8(c.n_ff, c.n_embd, rng);
    L.w_down = m->q8(c.n_embd, c.n_ff, rng);
    m->w.layers.push_back(L);
  }
  return m;
}

// Decode tokens per second of `batch` sequences through `forward` (a ModelRunner or CudaRunner
// call), after their prompts.
template <class Forward>
double decode_rate(const RandomModel& m, KvCache& kv, int batch, int prompt, int steps, Forward&& forward) {
  std::vector<SequenceKv> seqs(static_cast<size_t>(batch));
  std::vector<SequenceKv*> ptrs;
  for (auto& s : seqs) ptrs.push_back(&s);
  std::vector<float> logits(static_cast<size_t>(batch) * m.c.n_vocab);
  std::mt19937 rng(9);
  for (int b = 0; b < batch; ++b) {
    if (Status st = kv.reserve(seqs[static_cast<size_t>(b)], prompt + steps); !st.ok()) die(st.error().to_string());
    std::vector<BatchToken> toks;
    for (int i = 0; i < prompt; ++i)
      toks.push_back({static_cast<TokenId>(rng() % static_cast<uint32_t>(m.c.n_vocab)), i, b, i + 1 == prompt, -1});
    check(forward(toks, ptrs, logits.data()));
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    std::vector<BatchToken> toks;
    for (int b = 0; b < batch; ++b)
      toks.push_back({static_cast<TokenId>(rng() % static_cast<uint32_t>(m.c.n_vocab)), prompt + s, b, true, -1});
    check(forward(toks, ptrs, logits.data()));
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& s : seqs) kv.release(s);
  return batch * steps / sec;
}

// The "prefill latency of a 4k-token prompt while 8 generates decode", through a model
// runner: 8 sequences hold a 128-token prompt each; then a 4096-token prompt is prefilled in
// chunks that fill a 512-token step budget beside the 8 decode tokens (the engine's chunked
// prefill), and, for comparison, alone in 512-token chunks. Returns (prefill seconds alone,
// prefill seconds while decoding, decode step ms while prefilling).
struct PrefillTimes {
  double alone_s = 0, mixed_s = 0, step_ms = 0;
};
template <class Forward>
PrefillTimes prefill_while_decoding(const RandomModel& m, KvCache& kv, Forward&& forward) {
  constexpr int kDecoders = 8, kPrompt = 128, kLong = 4096, kBudget = 512;
  std::mt19937 rng(12);
  auto token = [&] { return static_cast<TokenId>(rng() % static_cast<uint32_t>(m.c.n_vocab)); };
  std::vector<float> logits(static_cast<size_t>(kDecoders + 1) * m.c.n_vocab);
  PrefillTimes out;
  for (const bool with_decode : {false, true}) {
    std::vector<SequenceKv> seqs(kDecoders + 1);  // the decoders, then the long prompt
    std::vector<SequenceKv*> ptrs;
    for (auto& s : seqs) ptrs.push_back(&s);
    const int steps_max = kLong / (kBudget - kDecoders) + 2;
    if (with_decode)
      for (int b = 0; b < kDecoders; ++b) {
        if (Status st = kv.reserve(seqs[static_cast<size_t>(b)], kPrompt + steps_max); !st.ok()) die(st.error().to_string());
        std::vector<BatchToken> toks;
        for (int i = 0; i < kPrompt; ++i) toks.push_back({token(), i, b, i + 1 == kPrompt, -1});
        check(forward(toks, ptrs, logits.data()));
      }
    if (Status st = kv.reserve(seqs[kDecoders], kLong); !st.ok()) die(st.error().to_string());
    const auto t0 = std::chrono::steady_clock::now();
    int done = 0, steps = 0;
    while (done < kLong) {
      std::vector<BatchToken> toks;
      if (with_decode)
        for (int b = 0; b < kDecoders; ++b) toks.push_back({token(), kPrompt + steps, b, true, -1});
      const int chunk = std::min(kLong - done, kBudget - static_cast<int>(toks.size()));
      for (int i = 0; i < chunk; ++i) toks.push_back({token(), done + i, kDecoders, done + i + 1 == kLong, -1});
      check(forward(toks, ptrs, logits.data()));
      done += chunk;
      ++steps;
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (with_decode) {
      out.mixed_s = sec;
      out.step_ms = 1000.0 * sec / steps;
    } else {
      out.alone_s = sec;
    }
    for (auto& s : seqs) kv.release(s);
  }
  return out;
}

// With dev == nullptr (--cpu-only), the CPU column alone.
std::string smollm2_gpu_vs_cpu(CudaDevice* dev) {
  const auto m = smollm2_shaped();
  auto cpu = CpuDevice::create();
  if (!cpu) die(cpu.error().to_string());
  const int prompt = 128, steps = 32;
  auto kv = KvCache::create(m->c, 512);
  if (!kv) die(kv.error().to_string());
  const int64_t mark = dev ? dev->mark() : 0;
  std::string rows;
  ModelRunner cpu_runner(m->c, m->w, **cpu, prompt);
  std::printf("\nSmolLM2-135M shapes (random Q8_0), prompt %d, %d decode steps, CPU: %s\n", prompt, steps,
              (*cpu)->describe().c_str());
  std::printf("%8s | %14s %14s %12s | %8s\n", "batch", "gpu graph t/s", "gpu direct t/s", "cpu tok/s", "gpu/cpu");
  for (const int batch : {1, 8}) {
    double g[2] = {0, 0};  // with graphs, without
    if (dev)
      for (int k = 0; k < 2; ++k) {
        auto r = CudaRunner::create(m->c, m->w, *dev, {.max_tokens = prompt, .n_pages = 512, .graphs = k == 0});
        if (!r) die(r.error().to_string());
        g[k] = decode_rate(*m, *kv, batch, prompt, steps,
                           [&](auto& t, auto& p, float* l) { return (*r)->forward(t, p, l); });
      }
    const double c = decode_rate(*m, *kv, batch, prompt, steps,
                                 [&](auto& t, auto& p, float* l) { return cpu_runner.forward(t, p, *kv, l); });
    std::printf("%8d | %14.1f %14.1f %12.1f | %7.2fx\n", batch, g[0], g[1], c, g[0] / c);
    char row[240];
    std::snprintf(row, sizeof row,
                  "%s{\"batch\": %d, \"gpu_graph_tok_s\": %.2f, \"gpu_direct_tok_s\": %.2f, \"cpu_tok_s\": %.2f}",
                  rows.empty() ? "" : ", ", batch, g[0], g[1], c);
    rows += row;
  }
  // A 4k prompt's prefill while 8 sequences decode (512-token steps).
  {
    auto kv_long = KvCache::create(m->c, 640);
    if (!kv_long) die(kv_long.error().to_string());
    ModelRunner cpu_long(m->c, m->w, **cpu, 512);
    PrefillTimes g;
    if (dev) {
      auto r = CudaRunner::create(m->c, m->w, *dev, {.max_tokens = 512, .n_pages = 640});
      if (!r) die(r.error().to_string());
      g = prefill_while_decoding(*m, *kv_long, [&](auto& t, auto& p, float* l) { return (*r)->forward(t, p, l); });
    }
    const PrefillTimes c = prefill_while_decoding(
        *m, *kv_long, [&](auto& t, auto& p, float* l) { return cpu_long.forward(t, p, *kv_long, l); });
    std::printf("\n4096-token prefill, 512-token steps | %10s %10s | %s\n", "gpu", "cpu", "gpu/cpu");
    std::printf("  alone                  (s)       | %10.3f %10.3f | %7.2fx\n", g.alone_s, c.alone_s,
                g.alone_s > 0 ? c.alone_s / g.alone_s : 0.0);
    std::printf("  while 8 decode         (s)       | %10.3f %10.3f | %7.2fx\n", g.mixed_s, c.mixed_s,
                g.mixed_s > 0 ? c.mixed_s / g.mixed_s : 0.0);
    std::printf("  decode step meanwhile  (ms)      | %10.2f %10.2f |\n", g.step_ms, c.step_ms);
    char row[320];
    std::snprintf(row, sizeof row,
                  ", {\"prefill_4k\": {\"gpu_alone_s\": %.4f, \"gpu_while_8_decode_s\": %.4f, \"gpu_step_ms\": %.3f, "
                  "\"cpu_alone_s\": %.4f, \"cpu_while_8_decode_s\": %.4f, \"cpu_step_ms\": %.3f}}",
                  g.alone_s, g.mixed_s, g.step_ms, c.alone_s, c.mixed_s, c.step_ms);
    rows += row;
  }
  if (dev) dev->reset_to(mark);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches = {1, 8, 32};
  std::string json;
  int steps = 20, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--cpu-only") {  // the SmolLM2-shaped CPU column alone (a machine without a GPU)
      smollm2_gpu_vs_cpu(nullptr);
      return 0;
    } else {
      std::fprintf(stderr, "usage: chorus_cuda_step_bench [--steps N] [--reps N] [--json FILE] [--cpu-only]\n");
      return 2;
    }
  }
  auto dev_r = CudaDevice::create({.device = 0, .pool_bytes = int64_t{40} << 30});
  if (!dev_r) die(dev_r.error().to_string());
  CudaDevice& dev = **dev_r;
  std::printf("%s\n", dev.describe().c_str());
  const Shape shape;
  const auto t0 = std::chrono::steady_clock::now();
  const Model model = make_model(dev, shape);
  std::printf("weights: %.1f GiB bf16 made on the device in %.1f s\n", static_cast<double>(dev.pool_used()) / (1 << 30),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::string rows;
  std::printf("%8s | %12s %10s | %12s %10s | %s\n", "batch", "step ms", "tok/s", "graph ms", "tok/s", "paper tok/s");
  const char* paper[] = {"106", "552", "1085"};
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const int n = batches[bi];
    const int64_t mark = dev.mark();
    Batch b = make_batch(dev, model, n);
    step(dev, model, b);  // warm-up (cuBLAS picks its kernels)
    check(dev.sync("warm-up step"));
    const double plain = time_steps(dev, [&] { step(dev, model, b); }, steps, reps);
    check(dev.sync("steps"));
    auto st = static_cast<cudaStream_t>(dev.stream());
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cuda_ok(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    step(dev, model, b);
    cuda_ok(cudaStreamEndCapture(st, &graph), "cudaStreamEndCapture");
    cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    const double graphed = time_steps(dev, [&] { cuda_ok(cudaGraphLaunch(exec, st), "cudaGraphLaunch"); }, steps, reps);
    check(dev.sync("graph steps"));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    std::printf("%8d | %12.2f %10.1f | %12.2f %10.1f | %s\n", n, plain, n * 1000.0 / plain, graphed,
                n * 1000.0 / graphed, bi < 3 ? paper[bi] : "-");
    char row[256];
    std::snprintf(row, sizeof row, "%s{\"batch\": %d, \"step_ms\": %.4f, \"graph_step_ms\": %.4f}", rows.empty() ? "" : ", ",
                  n, plain, graphed);
    rows += row;
    dev.reset_to(mark);
  }
  const std::string gemv = gemv_vs_bf16(dev, reps);
  const std::string smol = smollm2_gpu_vs_cpu(&dev);
  if (!json.empty()) {
    std::ofstream(json) << "{\"device\": \"" << dev.describe() << "\", \"shape\": \"qwen3.5-9b\", \"rows\": [" << rows
                        << "], \"gemv_q8_0_vs_bf16\": [" << gemv << "], \"smollm2_shaped\": [" << smol << "]}\n";
  }
  return 0;
}
