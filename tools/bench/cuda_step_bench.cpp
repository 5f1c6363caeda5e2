// chorus_cuda_step_bench: a Qwen3.5-9B-shaped decode step assembled from chorus's CUDA ops,
// with random bf16 weights generated on the device, timed with and without a CUDA graph, for
// batches of concurrent generates that each read a 3-block view (a shared 1024-token prompt, a
// shared 128-token notes block, and the generate's own block).
//
// What it is: every matrix product of the real step (cuBLAS bf16, f32 accumulation), the
// 8 attention layers' view attention (bf16 KV pages, query rotation in the kernel) and KV
// writes, the 24 Gated DeltaNet layers' recurrent update, every RMSNorm, residual add, SwiGLU,
// the output projection over the 248,320-token vocabulary and greedy sampling on the device.
// What it is not: the full model runner (measured after it: cuda_bench_runners.cpp, qwen35_9b_gpu). The GDN
// layers' L2 norms, query scale and gates are in it; their causal conv step is not (per token it touches
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

#include "device/cpu_device.h"
#include "device/cuda_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/cuda/cuda_runner.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "kernels/cuda/ops.h"
#include "tools/bench/cuda_bench_util.h"

namespace chorus::bench {
// cuda_bench_runners.cpp: the tables of the GEMV question and of the SmolLM2-shaped runners,
// as JSON rows.
std::string gemv_vs_bf16(CudaDevice& dev, int reps);
std::string smollm2_gpu_vs_cpu(CudaDevice* dev);
std::string qwen35_9b_gpu(CudaDevice& dev);
}  // namespace chorus::bench

namespace {

using namespace chorus;
using namespace chorus::bench;
using cuda::bf16_bits;

struct Shape {
  int hidden = 4096, layers = 32, interval = 4;  // every 4th layer is full attention
  int n_head = 16, n_kv = 4, head_dim = 256, n_rot = 64;
  int hk = 16, hv = 32, dk = 128, dv = 128;
  int ff = 12288;
  int vocab = 248320;
  int prompt = 1024, notes = 128, own = 32;  // the view: shared prompt, shared notes, own block
};

struct Matrix {
  bf16_bits* w = nullptr;
  int64_t rows = 0, cols = 0;
};

struct Layer {
  bool attention = false;
  float *norm1 = nullptr, *norm2 = nullptr;
  Matrix a, b, c, out;  // GDN: qkv, z, ba; attention: q(+gate), k, v
  Matrix gate, up, down;
};

struct Model {
  Shape s;
  std::vector<Layer> layers;
  float* out_norm = nullptr;
  Matrix output;
  float* qk_norm = nullptr;  // shared by q-norm and k-norm here (values do not matter)
};

Matrix matrix(CudaDevice& dev, int64_t rows, int64_t cols, uint64_t seed) {
  Matrix m{alloc<bf16_bits>(dev, rows * cols, "weights"), rows, cols};
  check(cuda::fill_uniform_bf16(m.w, rows * cols, seed, 0.02f, dev.stream()).message());
  return m;
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
    check(cuda::fill_uniform_bf16(kp, n_pages * b.page_stride, 11, 1.0f, dev.stream()).message());
    check(cuda::fill_uniform_bf16(vp, n_pages * b.page_stride, 12, 1.0f, dev.stream()).message());
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
  auto stage = [&](const float* x, int64_t cols) { check(cuda::to_bf16(x, b.hb, n * cols, st).message()); };
  auto gemm = [&](const Matrix& w, float* y) { check(cuda_gemm_bf16(dev, w.w, b.hb, y, w.rows, n, w.cols)); };
  size_t attn_i = 0, gdn_i = 0;
  for (const Layer& L : m.layers) {
    check(cuda::rmsnorm(b.x, L.norm1, b.h, n, s.hidden, 1e-6f, st).message());
    if (L.attention) {
      stage(b.h, s.hidden);
      gemm(L.a, b.big1);  // q and gate
      gemm(L.b, b.big2);  // k
      gemm(L.c, b.big3);  // v
      check(cuda::rmsnorm(b.big1, m.qk_norm, b.big1, n * s.n_head, s.head_dim, 1e-6f, st).message());
      check(cuda::rmsnorm(b.big2, m.qk_norm, b.big2, n * s.n_kv, s.head_dim, 1e-6f, st).message());
      check(cuda::rope(b.big2, b.pos, n, s.n_kv, s.head_dim, s.n_rot, 0.6f, 1.0f, true, st).message());
      check(cuda::write_kv(b.k_pool[attn_i], b.v_pool[attn_i], true, b.page_stride, s.n_kv * s.head_dim,
                           b.write_page, b.write_slot, b.big2, b.big3, n, st)
                .message());
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
      check(cuda::attention(a, st).message());
      check(cuda::swiglu(b.big1, b.big2, b.big3, int64_t{n} * s.n_head * s.head_dim, st)
                .message());  // the output gate
      stage(b.big3, L.out.cols);
      gemm(L.out, b.h);
      ++attn_i;
    } else {
      stage(b.h, s.hidden);
      gemm(L.a, b.big1);  // q, k, v (the conv step and L2 norms would read these)
      gemm(L.b, b.big2);  // z
      gemm(L.c, b.big3);  // beta, alpha
      check(cuda::l2norm_rows(b.gq, n * s.hk, s.dk, 1e-6f, st).message());
      check(cuda::l2norm_rows(b.gk, n * s.hk, s.dk, 1e-6f, st).message());
      check(cuda::scale(b.gq, int64_t{n} * s.hk * s.dk, 0.088f, st).message());
      check(cuda::gdn_gates(b.big3 + int64_t{n} * s.hv, b.big3, m.qk_norm, m.qk_norm, n, s.hv, b.gg, b.gbeta,
                            st)
                .message());
      cuda::GdnDecodeArgs g{
          b.states[gdn_i], b.gq, b.gk, b.gv, b.gg, b.gbeta, b.gout, n, s.hk, s.hv, s.dk, s.dv, true};
      check(cuda::gdn_decode(g, st).message());
      check(cuda::rmsnorm(b.gout, m.qk_norm, b.gout, n * s.hv, s.dv, 1e-6f, st).message());
      check(cuda::swiglu(b.big2, b.gout, b.big3, int64_t{n} * s.hv * s.dv, st)
                .message());  // RMSNorm(o) * silu(z)
      stage(b.big3, L.out.cols);
      gemm(L.out, b.h);
      ++gdn_i;
    }
    check(cuda::add(b.x, b.h, int64_t{n} * s.hidden, st).message());
    check(cuda::rmsnorm(b.x, L.norm2, b.h, n, s.hidden, 1e-6f, st).message());
    stage(b.h, s.hidden);
    gemm(L.gate, b.big1);
    gemm(L.up, b.big2);
    check(cuda::swiglu(b.big1, b.big2, b.big3, int64_t{n} * s.ff, st).message());
    stage(b.big3, s.ff);
    gemm(L.down, b.h);
    check(cuda::add(b.x, b.h, int64_t{n} * s.hidden, st).message());
  }
  check(cuda::rmsnorm(b.x, m.out_norm, b.h, n, s.hidden, 1e-6f, st).message());
  stage(b.h, s.hidden);
  gemm(m.output, b.logits);
  check(cuda::argmax(b.logits, n, s.vocab, b.next, st).message());
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
      std::fprintf(stderr,
                   "usage: chorus_cuda_step_bench [--steps N] [--reps N] [--json FILE] [--cpu-only]\n");
      return 2;
    }
  }
  auto dev_r = CudaDevice::create({.device = 0, .pool_bytes = int64_t{80} << 30});
  if (!dev_r) die(dev_r.error().to_string());
  CudaDevice& dev = **dev_r;
  std::printf("%s\n", dev.describe().c_str());
  const Shape shape;
  const auto t0 = std::chrono::steady_clock::now();
  const Model model = make_model(dev, shape);
  std::printf("weights: %.1f GiB bf16 made on the device in %.1f s\n",
              static_cast<double>(dev.pool_used()) / (1 << 30),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::string rows;
  std::printf("%8s | %12s %10s | %12s %10s | %s\n", "batch", "step ms", "tok/s", "graph ms", "tok/s",
              "paper tok/s");
  const char* paper[] = {"106", "552", "1085"};
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const int n = batches[bi];
    const int64_t mark = dev.mark();
    Batch b = make_batch(dev, model, n);
    step(dev, model, b);  // warm-up (cuBLAS picks its kernels)
    check(dev.sync("warm-up step"));
    const double plain = time_steps(
        dev, [&] { step(dev, model, b); }, steps, reps);
    check(dev.sync("steps"));
    auto st = static_cast<cudaStream_t>(dev.stream());
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cuda_ok(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    step(dev, model, b);
    cuda_ok(cudaStreamEndCapture(st, &graph), "cudaStreamEndCapture");
    cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    const double graphed = time_steps(
        dev, [&] { cuda_ok(cudaGraphLaunch(exec, st), "cudaGraphLaunch"); }, steps, reps);
    check(dev.sync("graph steps"));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    std::printf("%8d | %12.2f %10.1f | %12.2f %10.1f | %s\n", n, plain, n * 1000.0 / plain, graphed,
                n * 1000.0 / graphed, bi < 3 ? paper[bi] : "-");
    char row[256];
    std::snprintf(row, sizeof row, "%s{\"batch\": %d, \"step_ms\": %.4f, \"graph_step_ms\": %.4f}",
                  rows.empty() ? "" : ", ", n, plain, graphed);
    rows += row;
    dev.reset_to(mark);
  }
  const std::string gemv = gemv_vs_bf16(dev, reps);
  const std::string smol = smollm2_gpu_vs_cpu(&dev);
  const std::string runner = qwen35_9b_gpu(dev);
  if (!json.empty()) {
    std::ofstream(json) << "{\"device\": \"" << dev.describe() << "\", \"shape\": \"qwen3.5-9b\", \"rows\": ["
                        << rows << "], \"gemv_q8_0_vs_bf16\": [" << gemv << "], \"smollm2_shaped\": [" << smol
                        << "], \"qwen35_9b_runner\": [" << runner << "]}\n";
  }
  return 0;
}
