// chorus_cuda_step_bench, part two: the model runners and the GEMV question (main() is in
// cuda_step_bench.cpp).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/cuda/cuda_runner.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "tools/bench/cuda_bench_util.h"

namespace chorus::bench {

using cuda::bf16_bits;

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
  const MatShape shapes[] = {{"ffn_up/gate", 12288, 4096},
                             {"ffn_down", 4096, 12288},
                             {"gdn_qkv", 8192, 4096},
                             {"output", 248320, 4096}};
  std::string rows;
  std::printf("\nGEMV on GGUF Q8_0 vs cuBLAS on bf16 (us per product, median of %d runs of 20)\n", reps);
  std::printf("%12s %5s | %10s %10s | %s\n", "matrix", "batch", "bf16 us", "q8_0 us", "bf16/q8_0");
  void* st = dev.stream();
  for (const MatShape& ms : shapes) {
    const int64_t mark = dev.mark();
    const int64_t row_bytes = ms.cols / 32 * 34;
    auto* wq = alloc<uint8_t>(dev, ms.rows * row_bytes, "q8_0 weights");
    check(cuda::fill_uniform_f32(reinterpret_cast<float*>(wq), ms.rows * row_bytes / 4, 21, 1.0f, st)
              .message());
    auto* wb = alloc<bf16_bits>(dev, ms.rows * ms.cols, "bf16 weights");
    check(cuda::fill_uniform_bf16(wb, ms.rows * ms.cols, 22, 0.02f, st).message());
    float* x = vec(dev, 4 * ms.cols, 23);
    auto* xb = alloc<bf16_bits>(dev, 4 * ms.cols, "x bf16");
    float* y = alloc<float>(dev, 4 * ms.rows, "y");
    for (const int n : {1, 2, 4}) {
      auto bf16 = [&] {
        check(cuda::to_bf16(x, xb, n * ms.cols, st).message());
        check(cuda_gemm_bf16(dev, wb, xb, y, ms.rows, n, ms.cols));
      };
      auto q8 = [&] { check(cuda::gemv_q8_0(wq, row_bytes, ms.rows, ms.cols, x, n, y, st).message()); };
      bf16();
      q8();
      check(dev.sync("gemv warm-up"));
      const double t_b = 1000.0 * time_steps(dev, bf16, 20, reps),
                   t_q = 1000.0 * time_steps(dev, q8, 20, reps);
      std::printf("%12s %5d | %10.1f %10.1f | %8.2fx\n", ms.name, n, t_b, t_q, t_b / t_q);
      char row[200];
      std::snprintf(row, sizeof row,
                    "%s{\"matrix\": \"%s\", \"batch\": %d, \"bf16_us\": %.2f, \"q8_0_us\": %.2f}",
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
// CpuRunner (every core of the machine): `batch` sequences of a 128-token prompt each, then
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

// Decode tokens per second of `batch` sequences through `forward` (a CpuRunner or CudaRunner
// call), after their prompts.
template <class Forward>
double decode_rate(const RandomModel& m, KvCache& kv, int batch, int prompt, int steps, Forward&& forward) {
  std::vector<SequenceKv> seqs(static_cast<size_t>(batch));
  std::vector<SequenceKv*> ptrs;
  for (auto& s : seqs) ptrs.push_back(&s);
  std::vector<float> logits(static_cast<size_t>(batch) * m.c.n_vocab);
  std::mt19937 rng(9);
  for (int b = 0; b < batch; ++b) {
    if (Status st = kv.reserve(seqs[static_cast<size_t>(b)], prompt + steps); !st.ok())
      die(st.error().to_string());
    std::vector<BatchToken> toks;
    for (int i = 0; i < prompt; ++i)
      toks.push_back(
          {static_cast<TokenId>(rng() % static_cast<uint32_t>(m.c.n_vocab)), i, b, i + 1 == prompt, -1});
    check(forward(toks, ptrs, logits.data()));
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    std::vector<BatchToken> toks;
    for (int b = 0; b < batch; ++b)
      toks.push_back(
          {static_cast<TokenId>(rng() % static_cast<uint32_t>(m.c.n_vocab)), prompt + s, b, true, -1});
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
        if (Status st = kv.reserve(seqs[static_cast<size_t>(b)], kPrompt + steps_max); !st.ok())
          die(st.error().to_string());
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
      for (int i = 0; i < chunk; ++i)
        toks.push_back({token(), done + i, kDecoders, done + i + 1 == kLong, -1});
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
  CpuRunner cpu_runner(m->c, m->w, **cpu, prompt);
  std::printf("\nSmolLM2-135M shapes (random Q8_0), prompt %d, %d decode steps, CPU: %s\n", prompt, steps,
              (*cpu)->describe().c_str());
  std::printf("%8s | %14s %14s %12s | %8s\n", "batch", "gpu graph t/s", "gpu direct t/s", "cpu tok/s",
              "gpu/cpu");
  for (const int batch : {1, 8}) {
    double g[2] = {0, 0};  // with graphs, without
    if (dev)
      for (int k = 0; k < 2; ++k) {
        auto r =
            CudaRunner::create(m->c, m->w, *dev, {.max_tokens = prompt, .n_pages = 512, .graphs = k == 0});
        if (!r) die(r.error().to_string());
        g[k] = decode_rate(*m, *kv, batch, prompt, steps,
                           [&](auto& t, auto& p, float* l) { return (*r)->forward(t, p, l); });
      }
    const double c = decode_rate(*m, *kv, batch, prompt, steps, [&](auto& t, auto& p, float* l) {
      return cpu_runner.forward(t, p, *kv, l);
    });
    std::printf("%8d | %14.1f %14.1f %12.1f | %7.2fx\n", batch, g[0], g[1], c, g[0] / c);
    char row[240];
    std::snprintf(
        row, sizeof row,
        "%s{\"batch\": %d, \"gpu_graph_tok_s\": %.2f, \"gpu_direct_tok_s\": %.2f, \"cpu_tok_s\": %.2f}",
        rows.empty() ? "" : ", ", batch, g[0], g[1], c);
    rows += row;
  }
  // A 4k prompt's prefill while 8 sequences decode (512-token steps).
  {
    auto kv_long = KvCache::create(m->c, 640);
    if (!kv_long) die(kv_long.error().to_string());
    CpuRunner cpu_long(m->c, m->w, **cpu, 512);
    PrefillTimes g;
    if (dev) {
      auto r = CudaRunner::create(m->c, m->w, *dev, {.max_tokens = 512, .n_pages = 640});
      if (!r) die(r.error().to_string());
      g = prefill_while_decoding(*m, *kv_long,
                                 [&](auto& t, auto& p, float* l) { return (*r)->forward(t, p, l); });
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
    std::snprintf(
        row, sizeof row,
        ", {\"prefill_4k\": {\"gpu_alone_s\": %.4f, \"gpu_while_8_decode_s\": %.4f, \"gpu_step_ms\": %.3f, "
        "\"cpu_alone_s\": %.4f, \"cpu_while_8_decode_s\": %.4f, \"cpu_step_ms\": %.3f}}",
        g.alone_s, g.mixed_s, g.step_ms, c.alone_s, c.mixed_s, c.step_ms);
    rows += row;
  }
  if (dev) dev->reset_to(mark);
  return rows;
}

// ---- A Qwen3.5-9B-shaped hybrid model through the CUDA runner (the benchmark) ----------
//
// The released config's shapes (24 Gated DeltaNet layers, every 4th layer gated attention), with
// random bf16 weights: one 2 GiB host buffer of random values in [-0.02, 0.02] that every matrix
// reads a window of (the speed does not depend on the values), uploaded once by the runner.
std::unique_ptr<RandomModel> qwen35_9b_shaped() {
  auto m = std::make_unique<RandomModel>();
  ModelConfig& c = m->c;
  c.arch = "qwen35";
  c.name = "qwen3.5-9b-shaped";
  c.n_vocab = 248320;
  c.n_embd = 4096;
  c.n_layer = 32;
  c.n_head = 16;
  c.n_head_kv = 4;
  c.head_dim = 256;
  c.n_ff = 12288;
  c.n_ctx_train = 262144;
  c.norm_eps = 1e-6f;
  c.rope_base = 1e7f;
  c.n_rot = 64;
  c.rope_layout = RopeLayout::rope_neox;
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.gdn = {.conv_kernel = 4, .head_dim = 128, .n_k_heads = 16, .n_v_heads = 32, .tiled_heads = true};
  c.linear_layer.resize(32);
  c.kv_layer.assign(32, -1);
  for (int l = 0; l < c.n_layer; ++l) {
    c.linear_layer[static_cast<size_t>(l)] = (l + 1) % 4 != 0;
    if (!c.is_linear(l)) c.kv_layer[static_cast<size_t>(l)] = c.n_kv_layer++;
  }
  std::vector<uint8_t> buf(static_cast<size_t>(c.n_vocab) * c.n_embd * 2);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.02f, 0.02f);
  const size_t tile = size_t{1} << 21;  // bytes of random values, then copied along the buffer
  for (size_t i = 0; i < tile; i += 2) {
    const float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const auto h = static_cast<uint16_t>(bits >> 16);
    std::memcpy(&buf[i], &h, 2);
  }
  for (size_t at = tile; at < buf.size(); at += tile)
    std::memcpy(&buf[at], buf.data(), std::min(tile, buf.size() - at));
  m->bytes.push_back(std::move(buf));
  const uint8_t* data = m->bytes.back().data();
  auto mat = [data](int64_t rows, int64_t cols) {
    return WeightMatrix{TensorType::bf16, rows, cols, data, static_cast<size_t>(cols * 2)};
  };
  auto filled = [&](int64_t n, float v) {
    m->vecs.emplace_back(static_cast<size_t>(n), v);
    return static_cast<const float*>(m->vecs.back().data());
  };
  const GdnConfig& d = c.gdn;
  m->w.token_embd = mat(c.n_vocab, c.n_embd);
  m->w.output = mat(c.n_vocab, c.n_embd);
  m->w.output_norm = filled(c.n_embd, 1.0f);
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights L;
    L.attn_norm = filled(c.n_embd, 1.0f);
    L.ffn_norm = filled(c.n_embd, 1.0f);
    L.w_gate = mat(c.n_ff, c.n_embd);
    L.w_up = mat(c.n_ff, c.n_embd);
    L.w_down = mat(c.n_embd, c.n_ff);
    if (c.is_linear(l)) {
      L.w_qkv = mat(d.conv_dim(), c.n_embd);
      L.w_z = mat(d.value_dim(), c.n_embd);
      L.w_beta = mat(d.n_v_heads, c.n_embd);
      L.w_alpha = mat(d.n_v_heads, c.n_embd);
      L.conv = filled(int64_t{d.conv_kernel} * d.conv_dim(), 0.25f);
      L.ssm_a = filled(d.n_v_heads, -1.0f);
      L.dt_bias = filled(d.n_v_heads, 0.0f);
      L.ssm_norm = filled(d.head_dim, 1.0f);
      L.w_ssm_out = mat(c.n_embd, d.value_dim());
    } else {
      L.wq = mat(2 * c.q_dim(), c.n_embd);  // each head's query, then its gate
      L.wk = mat(c.kv_dim(), c.n_embd);
      L.wv = mat(c.kv_dim(), c.n_embd);
      L.wo = mat(c.n_embd, c.q_dim());
      L.q_norm = filled(c.head_dim, 1.0f);
      L.k_norm = filled(c.head_dim, 1.0f);
    }
    m->w.layers.push_back(L);
  }
  return m;
}

// The model through CudaRunner: `batch` concurrent generates, each writing its own block under
// the view [a shared 1024-token prompt, a shared 128-token notes block, its own block], greedy
// tokens drawn on the device; tokens per second and step milliseconds over 32 steps after
// K + 1 warm-up steps (the first composes the views' Gated DeltaNet state from the blocks'
// summaries; every graph key of the timed steps is seen), with CUDA graphs and without. Then 8
// writers reading 8 live thinkers, with chain reads and composing each view; then a 4096-token
// prompt's prefill while 8 sequences decode, and the recurrence's part of it. JSON rows.
std::string qwen35_9b_gpu(CudaDevice& dev) {
  const auto m = qwen35_9b_shaped();
  const ModelConfig& c = m->c;
  constexpr int64_t kPages = 2048;
  constexpr int kPrompt = 1024, kNotes = 128, kSteps = 32, kChunk = 512;
  const int kWarm = c.gdn.conv_kernel + 1;
  const int64_t mark = dev.mark();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = CudaRunner::create(c, m->w, dev,
                              {.max_tokens = kChunk, .n_pages = kPages, .kv_bf16 = true, .linear_slots = 40});
  if (!r) die(r.error().to_string());
  CudaRunner& runner = **r;
  auto kv = KvCache::create(c, kPages, &runner);  // the page bookkeeping; the pages are the runner's
  if (!kv) die(kv.error().to_string());
  std::printf(
      "\nQwen3.5-9B shapes through the CUDA runner (random bf16 weights uploaded in %.1f s; bf16 KV)\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::mt19937 rng(5);
  auto token = [&] { return static_cast<TokenId>(rng() % static_cast<uint32_t>(c.n_vocab)); };
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  std::vector<SequenceKv> blocks(2 + 32);
  std::vector<SequenceKv*> ptrs;
  for (auto& b : blocks) ptrs.push_back(&b);
  // The prompt, then the notes under [prompt, notes], in steps of up to kChunk tokens.
  const std::vector<View> context = {{0, 1}};
  for (const auto& [seq, n, view] : {std::tuple{0, kPrompt, -1}, std::tuple{1, kNotes, 0}}) {
    check(kv->reserve(blocks[static_cast<size_t>(seq)], n));
    for (int done = 0; done < n; done += kChunk) {
      std::vector<BatchToken> toks;
      for (int i = done; i < std::min(n, done + kChunk); ++i)
        toks.push_back({token(), i, seq, i + 1 == n, view});
      check(runner.forward(toks, ptrs, logits.data(), context));
    }
  }
  std::string rows;
  std::printf("%8s | %10s %10s | %12s %10s | %s\n", "batch", "step ms", "tok/s", "graph ms", "tok/s",
              "paper tok/s (goal: 1.2x)");
  // Milliseconds per decode step in which sequence 2 + i writes a token under views[i], each in a
  // fresh block, greedy tokens drawn on the device.
  auto decode_ms = [&](const std::vector<View>& views) {
    const auto n = views.size();
    for (size_t i = 0; i < n; ++i) check(kv->reserve(blocks[2 + i], kSteps + kWarm));
    const std::vector<std::optional<PlannedDraw>> draws(n, PlannedDraw{});
    std::vector<TokenId> next(n), cur(n);
    for (auto& t : cur) t = token();
    auto step = [&](int pos) {
      std::vector<BatchToken> toks;
      for (size_t i = 0; i < n; ++i)
        toks.push_back({cur[i], pos, static_cast<int32_t>(2 + i), true, static_cast<int32_t>(i)});
      check(runner.forward(toks, ptrs, nullptr, views, draws, next.data()));
      cur = next;
    };
    // Warm-up: the views' state is composed in the first step, and the steps of a block's first
    // K-1 tokens (head rows) and of its first body token have graph keys of their own.
    for (int s = 0; s < kWarm; ++s) step(s);
    const auto s0 = std::chrono::steady_clock::now();
    for (int s = 0; s < kSteps; ++s) step(kWarm + s);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    for (size_t i = 0; i < n; ++i) kv->release(blocks[2 + i]);
    return 1000.0 * sec / kSteps;
  };
  // `batch` generates, each under [prompt, notes, own].
  auto generates = [](int batch) {
    std::vector<View> views;
    for (int b = 0; b < batch; ++b) views.push_back({0, 1, 2 + b});
    return views;
  };
  const char* paper[] = {"106", "552", "1085"};
  int bi = 0;
  for (const int batch : {1, 8, 32}) {
    runner.set_graphs(false);
    const double direct = decode_ms(generates(batch));
    runner.set_graphs(true);
    const double graphed = decode_ms(generates(batch));
    std::printf("%8d | %10.2f %10.1f | %12.2f %10.1f | %s\n", batch, direct, batch * 1000.0 / direct, graphed,
                batch * 1000.0 / graphed, paper[bi++]);
    char row[240];
    std::snprintf(row, sizeof row,
                  "%s{\"batch\": %d, \"runner_step_ms\": %.4f, \"runner_graph_step_ms\": %.4f}",
                  rows.empty() ? "" : ", ", batch, direct, graphed);
    rows += row;
  }
  // AsyncLLM's writers reading live thinkers: 8 pairs, each thinker under [prompt, notes, own],
  // each writer under [prompt, notes, its thinker, own], all writing every step (16 tokens), so
  // every writer's view changes every step: read through the writers' queries (chain reads), or
  // each view composed afresh before the step.
  std::vector<View> live;
  constexpr int kPairs = 8;
  for (int i = 0; i < 2 * kPairs; ++i)
    live.push_back(i < kPairs ? View{0, 1, 2 + i} : View{0, 1, 2 + i - kPairs, 2 + i});
  auto live_ms = [&](bool chain) {
    runner.set_chain_reads(chain);
    return decode_ms(live);
  };
  const int64_t reads0 = runner.chain_reads().reads;
  const double chain_ms = live_ms(true), composed_ms = live_ms(false);
  runner.set_chain_reads(true);
  std::printf(
      "8 writers reading 8 live thinkers (16 tokens a step, graphs on): step %.2f ms with chain reads "
      "(%lld reads, warm-up included), %.2f ms composing each view (%.2fx)\n",
      chain_ms, static_cast<long long>(runner.chain_reads().reads - reads0), composed_ms,
      composed_ms / chain_ms);
  {
    char row[200];
    std::snprintf(row, sizeof row,
                  ", {\"live_thinkers_8\": {\"chain_step_ms\": %.4f, \"composed_step_ms\": %.4f}}", chain_ms,
                  composed_ms);
    rows += row;
  }
  std::printf("(%d graphs captured; %s)\n", runner.graphs(), runner.describe().c_str());
  for (auto& b : blocks) kv->release(b);
  const PrefillTimes p =
      prefill_while_decoding(*m, *kv, [&](auto& t, auto& q, float* l) { return runner.forward(t, q, l); });
  std::printf(
      "4096-token prefill, 512-token steps: alone %.3f s, while 8 decode %.3f s (decode step meanwhile %.2f "
      "ms)\n",
      p.alone_s, p.mixed_s, p.step_ms);
  char row[240];
  std::snprintf(row, sizeof row,
                ", {\"prefill_4k\": {\"alone_s\": %.4f, \"while_8_decode_s\": %.4f, \"step_ms\": %.3f}}",
                p.alone_s, p.mixed_s, p.step_ms);
  rows += row;
  // The Gated DeltaNet recurrence of a 4096-token prompt in one linear layer: its two gdn_runs
  // passes (exact, token after token, rows in registers), the state with outputs and the fold
  // into the block's summary [A; B]. Times the linear layers, their share of the prefill above
  // says whether a chunk-parallel form would pay. Random factors (decays in (0.6, 1], beta in
  // [0, 1]); the speed does not depend on the values.
  {
    const GdnConfig& d = c.gdn;
    constexpr int kLong = 4096;
    const int64_t dk = d.head_dim, Hv = d.n_v_heads;
    float* q = vec(dev, int64_t{kLong} * d.key_dim(), 41, 0.15f);
    float* k = vec(dev, int64_t{kLong} * d.key_dim(), 42, 0.15f);
    float* v = vec(dev, int64_t{kLong} * d.value_dim(), 43);
    std::vector<float> host_g(static_cast<size_t>(kLong * Hv)), host_beta(host_g.size());
    std::uniform_real_distribution<float> decay(-0.5f, 0.0f), strength(0.0f, 1.0f);
    for (size_t i = 0; i < host_g.size(); ++i) {
      host_g[i] = decay(rng);
      host_beta[i] = strength(rng);
    }
    float* g = alloc<float>(dev, kLong * Hv, "gdn g");
    float* beta = alloc<float>(dev, kLong * Hv, "gdn beta");
    check(dev.upload(g, host_g.data(), static_cast<int64_t>(host_g.size() * sizeof(float))));
    check(dev.upload(beta, host_beta.data(), static_cast<int64_t>(host_beta.size() * sizeof(float))));
    float* S = vec(dev, Hv * dk * dk, 46);
    float* AB = vec(dev, Hv * 2 * dk * dk, 47);
    float* out = alloc<float>(dev, int64_t{kLong} * d.value_dim(), "gdn out");
    auto* mats = alloc<float*>(dev, 2, "gdn run matrices");
    auto* first = alloc<int32_t>(dev, 2, "gdn run ranges");
    const float* const both[2] = {S, AB};
    const int32_t range[2] = {0, kLong};
    check(dev.upload(mats, both, sizeof both));
    check(dev.upload(first, range, sizeof range));
    const cuda::GdnRunsArgs state{mats,        first,      q,          k, v,
                                  g,           beta,       out,        1, d.n_k_heads,
                                  d.n_v_heads, d.head_dim, d.head_dim, 0, d.tiled_heads};
    const cuda::GdnRunsArgs fold{mats + 1,    first,      nullptr,    k,          v,
                                 g,           beta,       nullptr,    1,          d.n_k_heads,
                                 d.n_v_heads, d.head_dim, d.head_dim, d.head_dim, d.tiled_heads};
    auto run_state = [&] { check(cuda::gdn_runs(state, dev.stream()).message()); };
    auto run_fold = [&] { check(cuda::gdn_runs(fold, dev.stream()).message()); };
    run_state();
    run_fold();
    check(dev.sync("gdn_runs warm-up"));
    const double state_ms = time_steps(dev, run_state, 1, 5), fold_ms = time_steps(dev, run_fold, 1, 5);
    int n_linear = 0;
    for (int l = 0; l < c.n_layer; ++l) n_linear += c.is_linear(l);
    const double total = (state_ms + fold_ms) * n_linear;
    std::printf(
        "gdn_runs over a 4096-token prompt, a linear layer: state %.3f ms + fold %.3f ms; x%d = %.1f ms of "
        "the %.3f s prefill (%.1f %%)\n",
        state_ms, fold_ms, n_linear, total, p.alone_s, 100.0 * total / (1000.0 * p.alone_s));
    std::snprintf(row, sizeof row, ", {\"gdn_runs_4k_layer_ms\": {\"state\": %.4f, \"fold\": %.4f}}",
                  state_ms, fold_ms);
    rows += row;
  }
  r->reset();
  dev.reset_to(mark);
  return rows;
}

}  // namespace chorus::bench
