// The CUDA runner end to end (label gpu): logits against the CPU runner on the same file, and
// views against contiguous encoding on the GPU itself. Runs on the tiny golden models (they
// travel with the working tree to a lent GPU machine) and on the default model where it exists
// (SmolLM2, 98 MB, too large to carry there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <list>
#include <map>
#include <random>
#include <span>

#include "device/cpu_device.h"
#include "device/cuda_device.h"
#include "device/cuda_info.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/cuda/cuda_runner.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/model_paths.h"
#include "tests/support/bf16_weights.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

std::string goldens(const std::string& f) {
  return test::goldens_dir() + "/" + f;
}

// The GPU runner over `model`, the CPU runner (f32 activations) over `cpu_model`: the same file
// with its weights rounded to bf16, as the GPU holds them (tests/support/bf16_weights.h), so that the two
// differ by the device's arithmetic alone.
struct Pair {
  std::unique_ptr<Model> model, cpu_model;
  std::list<std::vector<float>> cpu_weights;
  std::unique_ptr<CpuDevice> cpu;
  std::unique_ptr<CudaDevice> gpu;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<CpuRunner> cpu_runner;
  std::unique_ptr<CudaRunner> gpu_runner;
};

constexpr int64_t kPages = 64;

// Loads `path` for both runners, or says why the test cannot run.
std::string load(const std::string& path, Pair* p, bool kv_bf16 = false) {
  const CudaInfo info = cuda_info();
  if (info.device_count == 0) return "no CUDA device: " + info.error;
  auto m = Model::load(path);
  if (!m) return "cannot load " + path + ": " + m.error().to_string();
  p->model = std::move(*m);
  auto mc = Model::load(path);
  if (!mc) return "cannot load " + path + ": " + mc.error().to_string();
  p->cpu_model = std::move(*mc);
  test::round_weights_to_bf16(p->cpu_model->weights, &p->cpu_weights);
  auto cpu = CpuDevice::create();
  auto gpu = CudaDevice::create({.device = 0, .pool_bytes = int64_t{4} << 30});
  if (!cpu || !gpu) return "no devices";
  p->cpu = std::move(*cpu);
  p->gpu = std::move(*gpu);
  auto kv = KvCache::create(p->model->config, kPages);
  if (!kv) return kv.error().to_string();
  p->kv = std::make_unique<KvCache>(std::move(*kv));
  p->cpu_runner =
      std::make_unique<CpuRunner>(p->cpu_model->config, p->cpu_model->weights, *p->cpu, 128, true);
  auto r = CudaRunner::create(p->model->config, p->model->weights, *p->gpu,
                              {.max_tokens = 128, .n_pages = kPages, .kv_bf16 = kv_bf16});
  if (!r) return "";  // the caller asserts on create() itself
  p->gpu_runner = std::move(*r);
  return "";
}

std::vector<TokenId> random_tokens(const Model& m, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, m.config.n_vocab - 1);
  std::vector<TokenId> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

// ||a - b|| / ||b|| and whether the largest entries agree.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}
size_t argmax(const std::vector<float>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The token the GPU would pick greedily is, by the CPU's logits, within `margin` (of the largest
// |logit|) of the CPU's pick: the same token, or a near tie that bf16 rounding may flip.
void expect_same_pick(const std::vector<float>& got, const std::vector<float>& want, double margin) {
  double scale = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  EXPECT_GE(want[argmax(got)], want[argmax(want)] - margin * scale)
      << "GPU picks " << argmax(got) << ", CPU picks " << argmax(want);
}

// Writes `tokens` into blocks[w] seeing `views[view]` (-1: own block), in one forward; the
// logits after the last token. `gpu` picks the runner.
// One forward on a GPU runner (`on`) or, with null, on the CPU's.
Status forward_on(Pair& p, CudaRunner* on, std::span<const BatchToken> batch,
                  std::span<SequenceKv* const> seqs, float* logits, std::span<const View> views) {
  return on ? on->forward(batch, seqs, logits, views)
            : p.cpu_runner->forward(batch, seqs, *p.kv, logits, views);
}

// `on` picks a GPU runner (null: the CPU's).
std::vector<float> write_on(Pair& p, CudaRunner* on, std::vector<SequenceKv>& blocks, int w,
                            const std::vector<TokenId>& tokens, const std::vector<View>& views, int view) {
  std::vector<SequenceKv*> ptrs;
  for (auto& b : blocks) ptrs.push_back(&b);
  SequenceKv& s = blocks[static_cast<size_t>(w)];
  EXPECT_TRUE(p.kv->reserve(s, s.n_tokens + static_cast<int64_t>(tokens.size())).ok());
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < tokens.size(); ++i)
    batch.push_back({tokens[i], static_cast<int32_t>(s.n_tokens + static_cast<int64_t>(i)), w,
                     i + 1 == tokens.size(), view});
  std::vector<float> logits(static_cast<size_t>(p.model->config.n_vocab));
  const Status st = forward_on(p, on, batch, ptrs, logits.data(), views);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  return logits;
}
std::vector<float> write(Pair& p, bool gpu, std::vector<SequenceKv>& blocks, int w,
                         const std::vector<TokenId>& tokens, const std::vector<View>& views, int view) {
  return write_on(p, gpu ? p.gpu_runner.get() : nullptr, blocks, w, tokens, views, view);
}

// The GPU's logits against the CPU's (the same bf16-rounded weights, f32 activations there): the
// GPU rounds each product's activations to 8 bits of mantissa too, so the logits differ by about
// 1 % in L2 (estimated: the first device run prints what it saw); the greedy token agrees.
void gpu_matches_cpu(const std::string& path, bool kv_bf16) {
  Pair p;
  const std::string why = load(path, &p, kv_bf16);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner) << "CudaRunner::create failed on " << path;
  for (const uint32_t seed : {1u, 2u}) {
    const auto toks = random_tokens(*p.model, 37, seed);
    std::vector<SequenceKv> cpu_blocks(1), gpu_blocks(1);
    const auto want = write(p, false, cpu_blocks, 0, toks, {}, -1);
    const auto got = write(p, true, gpu_blocks, 0, toks, {}, -1);
    const double err = rel_l2(got, want);
    std::printf("  %s%s: logits rel L2 %.3e vs the CPU\n", path.c_str(), kv_bf16 ? " (bf16 KV)" : "", err);
    EXPECT_LT(err, 3e-2);
    expect_same_pick(got, want, 0.02);
    // A decode step on top, one token.
    const auto want2 = write(p, false, cpu_blocks, 0, {toks[3]}, {}, -1);
    const auto got2 = write(p, true, gpu_blocks, 0, {toks[3]}, {}, -1);
    EXPECT_LT(rel_l2(got2, want2), 3e-2);
    p.kv->release(cpu_blocks[0]);
    p.kv->release(gpu_blocks[0]);
  }
}

TEST(CudaRunner, TinyLlamaMatchesTheCpu) {
  gpu_matches_cpu(goldens("tiny_llama_f32.gguf"), false);
}
TEST(CudaRunner, TinyLlamaQuantizedMatchesTheCpu) {
  gpu_matches_cpu(goldens("tiny_llama.gguf"), false);
}
TEST(CudaRunner, TinyQwen3MatchesTheCpu) {
  gpu_matches_cpu(goldens("tiny_qwen3.gguf"), true);
}
// qwen2: q/k/v biases.
TEST(CudaRunner, TinyQwen2MatchesTheCpu) {
  gpu_matches_cpu(goldens("tiny_qwen2.gguf"), false);
}
// qwen35: Gated DeltaNet layers (37 tokens: a block head, 32 body tokens folded into the
// summary, 2 waiting in the compact buffer; the decode token appends to it) and gated attention.
TEST(CudaRunner, TinyQwen35MatchesTheCpu) {
  gpu_matches_cpu(goldens("tiny_qwen35.gguf"), false);
}
// Mixture-of-experts layers (4 experts, top 2, a shared expert), and qwen3next's layout (value
// heads over key heads h / 2, beta and alpha packed per key head) with them.
TEST(CudaRunner, TinyQwen35MoeMatchesTheCpu) {
  gpu_matches_cpu(goldens("tiny_qwen35moe.gguf"), false);
}
TEST(CudaRunner, TinyQwen3NextMatchesTheCpu) {
  gpu_matches_cpu(goldens("tiny_qwen3next_f32.gguf"), false);
}
TEST(CudaRunner, DefaultModelMatchesTheCpu) {
  if (!std::ifstream(default_model_path()).good())
    GTEST_SKIP() << "default model not at " << default_model_path();
  gpu_matches_cpu(default_model_path(), false);
}

// On the GPU, three blocks written one after another, each seeing the ones before through a
// view, then a fourth reading all three, give the logits of one contiguous block of the same
// tokens, for two orders. On the hybrid model each view's linear state is composed from the
// blocks' summaries on the device (heads convolved again with the tail before them).
void views_equal_contiguous(const std::string& file) {
  Pair p;
  const std::string why = load(goldens(file), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner);
  const std::vector<std::vector<TokenId>> parts = {
      random_tokens(*p.model, 21, 5), random_tokens(*p.model, 16, 6), random_tokens(*p.model, 7, 7),
      random_tokens(*p.model, 5, 8)};
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, std::vector<int>{2, 0, 1}}) {
    std::vector<SequenceKv> blocks(4);
    std::vector<View> views;
    View so_far;
    for (int b : order) {
      so_far.push_back(b);
      views.push_back(so_far);
      write(p, true, blocks, b, parts[static_cast<size_t>(b)], views, static_cast<int>(views.size()) - 1);
    }
    so_far.push_back(3);
    views.push_back(so_far);
    const auto got = write(p, true, blocks, 3, parts[3], views, static_cast<int>(views.size()) - 1);
    std::vector<TokenId> all;
    for (int b : order)
      all.insert(all.end(), parts[static_cast<size_t>(b)].begin(), parts[static_cast<size_t>(b)].end());
    all.insert(all.end(), parts[3].begin(), parts[3].end());
    std::vector<SequenceKv> one(1);
    const auto want = write(p, true, one, 0, all, {}, -1);
    const double err = rel_l2(got, want);
    std::printf("  view %d%d%d vs contiguous: rel L2 %.3e\n", order[0], order[1], order[2], err);
    EXPECT_LT(err, 5e-3);
    expect_same_pick(got, want, 0.005);
    for (auto& b : blocks) p.kv->release(b);
    p.kv->release(one[0]);
  }
}
TEST(CudaRunner, ViewsEqualContiguousEncoding) {
  views_equal_contiguous("tiny_llama_f32.gguf");
}
TEST(CudaRunner, HybridViewsEqualContiguousEncoding) {
  views_equal_contiguous("tiny_qwen35.gguf");
}

// One step that mixes sequences, as the batcher builds them: a writer appending 3 tokens through
// a view of a context block, and another block decoding 2 tokens on its own; the logits of each
// one's last token against the CPU's for the same step. `interleave` mixes the two sequences'
// tokens in the batch (the hybrid layers gather them by sequence and put them back).
void mixed_step_matches_cpu(const std::string& file, bool interleave) {
  Pair p;
  const std::string why = load(goldens(file), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner);
  const auto ctx = random_tokens(*p.model, 20, 11), own = random_tokens(*p.model, 9, 12);
  const auto w_new = random_tokens(*p.model, 3, 13), o_new = random_tokens(*p.model, 2, 14);
  const std::vector<View> views = {{0, 1}};
  std::vector<float> got, want;
  for (const bool gpu : {false, true}) {
    std::vector<SequenceKv> blocks(3);  // 0 context, 1 writer, 2 another program's block
    write(p, gpu, blocks, 0, ctx, {}, -1);
    write(p, gpu, blocks, 2, own, {}, -1);
    ASSERT_TRUE(p.kv->reserve(blocks[1], 3).ok());
    ASSERT_TRUE(p.kv->reserve(blocks[2], blocks[2].n_tokens + 2).ok());
    std::vector<BatchToken> batch;
    for (int i = 0; i < 3; ++i) batch.push_back({w_new[i], i, 1, i == 2, 0});
    for (int i = 0; i < 2; ++i)
      batch.push_back({o_new[i], static_cast<int32_t>(own.size()) + i, 2, i == 1, -1});
    if (interleave)
      batch = {batch[0], batch[3], batch[1], batch[4], batch[2]};  // logits rows: other, then writer
    std::vector<SequenceKv*> ptrs = {&blocks[0], &blocks[1], &blocks[2]};
    std::vector<float> logits(2 * static_cast<size_t>(p.model->config.n_vocab));
    const Status st = forward_on(p, gpu ? p.gpu_runner.get() : nullptr, batch, ptrs, logits.data(), views);
    ASSERT_TRUE(st.ok()) << st.error().to_string();
    (gpu ? got : want) = logits;
    for (auto& b : blocks) p.kv->release(b);
  }
  const size_t V = static_cast<size_t>(p.model->config.n_vocab);
  for (size_t r = 0; r < 2; ++r) {
    const std::vector<float> g(got.begin() + r * V, got.begin() + (r + 1) * V),
        w(want.begin() + r * V, want.begin() + (r + 1) * V);
    const double err = rel_l2(g, w);
    std::printf("  %s mixed step%s, row %zu: rel L2 %.3e vs the CPU\n", file.c_str(),
                interleave ? " (interleaved)" : "", r, err);
    EXPECT_LT(err, 3e-2);
    expect_same_pick(g, w, 0.02);
  }
}
TEST(CudaRunner, MixedStepMatchesTheCpu) {
  mixed_step_matches_cpu("tiny_llama_f32.gguf", false);
}
TEST(CudaRunner, HybridMixedStepMatchesTheCpu) {
  mixed_step_matches_cpu("tiny_qwen35.gguf", false);
  mixed_step_matches_cpu("tiny_qwen35.gguf", true);
}

// A hybrid block shared whole (KvCache::share_prefix) is copied on the device when one holder
// writes: both go on as the CPU's do, neither seeing the other's tokens.
TEST(CudaRunner, SharedHybridBlockIsCopiedOnWrite) {
  Pair p;
  const std::string why = load(goldens("tiny_qwen35.gguf"), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner) << "CudaRunner::create failed";
  // 32 tokens: the blocks share whole pages only, so no KV page is copied (`p.kv` has no page
  // store: a copy would reach the CPU's pages, not the device's).
  const auto ctx = random_tokens(*p.model, 32, 41), a = random_tokens(*p.model, 3, 42),
             b = random_tokens(*p.model, 2, 43);
  std::vector<std::vector<float>> out[2];
  for (const bool gpu : {false, true}) {
    std::vector<SequenceKv> blocks(2);
    write(p, gpu, blocks, 0, ctx, {}, -1);
    p.kv->share_prefix(blocks[0], 32, &blocks[1]);
    out[gpu].push_back(write(p, gpu, blocks, 1, a, {}, -1));
    out[gpu].push_back(write(p, gpu, blocks, 0, b, {}, -1));
    out[gpu].push_back(write(p, gpu, blocks, 1, b, {}, -1));
    for (auto& blk : blocks) p.kv->release(blk);
  }
  for (size_t i = 0; i < out[0].size(); ++i) {
    const double err = rel_l2(out[1][i], out[0][i]);
    std::printf("  shared block, write %zu: rel L2 %.3e vs the CPU\n", i, err);
    EXPECT_LT(err, 3e-2);
    expect_same_pick(out[1][i], out[0][i], 0.02);
  }
}

// Linear-state slots are a fixed pool: one more block than it holds is refused with a message
// that names the option, and a released block's slot serves the next one.
TEST(CudaRunner, LinearSlotsRunOutClearlyAndComeBack) {
  Pair p;
  const std::string why = load(goldens("tiny_qwen35.gguf"), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner);
  p.gpu_runner.reset();
  auto r = CudaRunner::create(p.model->config, p.model->weights, *p.gpu,
                              {.max_tokens = 32, .n_pages = kPages, .linear_slots = 2});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  p.gpu_runner = std::move(*r);
  std::vector<SequenceKv> blocks(3);
  const auto toks = random_tokens(*p.model, 5, 51);
  write(p, true, blocks, 0, toks, {}, -1);
  write(p, true, blocks, 1, toks, {}, -1);
  std::vector<SequenceKv*> ptrs = {&blocks[0], &blocks[1], &blocks[2]};
  ASSERT_TRUE(p.kv->reserve(blocks[2], 1).ok());
  const std::vector<BatchToken> one = {{toks[0], 0, 2, true, -1}};
  std::vector<float> logits(static_cast<size_t>(p.model->config.n_vocab));
  const Status st = p.gpu_runner->forward(one, ptrs, logits.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("all 2 linear-state slots are in use"), std::string::npos)
      << st.error().message;
  EXPECT_NE(st.error().message.find("linear_slots"), std::string::npos) << st.error().message;
  p.kv->release(blocks[0]);
  write(p, true, blocks, 2, {toks[0]}, {}, -1);
  EXPECT_EQ(blocks[2].n_tokens, 1);
  for (auto& b : blocks) p.kv->release(b);
}

// Decode steps replayed from CUDA graphs (padded to a power of two) give the logits of the same
// steps launched directly; the padding touches no real page. cuBLAS may choose another algorithm
// for the padded row count, so the bound is float rounding, not bits. Each sequence has tokens
// of its own, so a graph replayed with another step's sequences in the wrong places shows. On
// the hybrid model the padding rows run through a slot of their own, and the first decode step
// folds each block's full buffer (16 body tokens after the prompt) before the graph. Then, on
// each runner, a block written under the view [sequence 0, itself] (sequence 0's state composed
// from a summary of 16 body tokens and a buffer of 6) equals one contiguous block of the same
// tokens (written in one step that folds inside its layers, so launched directly).
void graphed_equals_direct(const std::string& file) {
  Pair p;
  const std::string why = load(goldens(file), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner);
  p.gpu_runner.reset();  // the pool goes back; two runners follow, freed in reverse order
  auto direct = CudaRunner::create(p.model->config, p.model->weights, *p.gpu,
                                   {.max_tokens = 128, .n_pages = kPages, .graphs = false});
  auto graphed =
      CudaRunner::create(p.model->config, p.model->weights, *p.gpu, {.max_tokens = 128, .n_pages = kPages});
  ASSERT_TRUE(direct.ok() && graphed.ok());
  std::vector<std::vector<TokenId>> prompt, next;
  for (uint32_t b = 0; b < 3; ++b) {
    prompt.push_back(random_tokens(*p.model, 19, 21 + b));
    next.push_back(random_tokens(*p.model, 6, 31 + b));
  }
  const auto tail = random_tokens(*p.model, 5, 41);
  std::vector<std::vector<float>> runs[2];
  for (int g = 0; g < 2; ++g) {
    CudaRunner& r = g ? **graphed : **direct;
    std::vector<SequenceKv> blocks(5);  // three sequences, then a block under a view and a contiguous one
    std::vector<SequenceKv*> ptrs;
    for (auto& b : blocks) ptrs.push_back(&b);
    std::vector<float> logits(3 * static_cast<size_t>(p.model->config.n_vocab));
    for (int b = 0; b < 3; ++b) {  // three sequences' prompts, one step each (19 tokens: padded to 32)
      ASSERT_TRUE(p.kv->reserve(blocks[static_cast<size_t>(b)], 19 + 6).ok());
      std::vector<BatchToken> batch;
      for (int i = 0; i < 19; ++i) batch.push_back({prompt[b][static_cast<size_t>(i)], i, b, i == 18, -1});
      ASSERT_TRUE(r.forward(batch, ptrs, logits.data()).ok());
    }
    for (int s = 0; s < 6; ++s) {  // decode steps of the three together (3 tokens: padded to 4)
      std::vector<BatchToken> batch;
      for (int b = 0; b < 3; ++b) batch.push_back({next[b][static_cast<size_t>(s)], 19 + s, b, true, -1});
      ASSERT_TRUE(r.forward(batch, ptrs, logits.data()).ok());
      runs[g].push_back(logits);
    }
    const auto viewed = write_on(p, &r, blocks, 3, tail, {{0, 3}}, 0);
    std::vector<TokenId> all = prompt[0];
    all.insert(all.end(), next[0].begin(), next[0].end());
    all.insert(all.end(), tail.begin(), tail.end());
    const auto contiguous = write_on(p, &r, blocks, 4, all, {}, -1);
    const double err = rel_l2(viewed, contiguous);
    std::printf("  %s: a block read through a view after decode steps vs contiguous: rel L2 %.3e\n",
                g ? "graphed" : "direct", err);
    EXPECT_LT(err, 5e-3);
    expect_same_pick(viewed, contiguous, 0.005);
    for (auto& b : blocks) p.kv->release(b);
  }
  double worst = 0;
  for (size_t s = 0; s < runs[0].size(); ++s) worst = std::max(worst, rel_l2(runs[1][s], runs[0][s]));
  std::printf("  graphed vs direct: largest rel L2 %.3e over 6 steps\n", worst);
  EXPECT_LT(worst, 1e-3);
  // The graphed runner did replay graphs (a capture that failed would have fallen back quietly).
  EXPECT_GE((*graphed)->graphs(), 2) << (*graphed)->describe();  // the prompts' size, the decode steps'
  EXPECT_EQ((*graphed)->describe().find("graphs off"), std::string::npos) << (*graphed)->describe();
  EXPECT_EQ((*direct)->graphs(), 0);
  graphed->reset();  // reverse order of creation
  direct->reset();
}
TEST(CudaRunner, GraphedStepsEqualDirectOnes) {
  graphed_equals_direct("tiny_llama_f32.gguf");
}
TEST(CudaRunner, HybridGraphedStepsEqualDirectOnes) {
  graphed_equals_direct("tiny_qwen35.gguf");
}

// A prefill larger than a graph (tiled attention, logits projected for the asked tokens only):
// a 40-token context block, then 100 tokens written through the view [context, own] in one
// step with logits after the 50th and the last, plus one decode token of the context block in
// the same step (a single token: the per-token kernel, compacted), against the CPU runner.
TEST(CudaRunner, TiledPrefillMatchesTheCpu) {
  Pair p;
  const std::string why = load(goldens("tiny_llama_f32.gguf"), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner);
  const auto ctx = random_tokens(*p.model, 40, 31), own = random_tokens(*p.model, 100, 32);
  const std::vector<View> views = {{0, 1}};
  const int64_t V = p.model->config.n_vocab;
  std::vector<float> got, want;
  for (const bool gpu : {false, true}) {
    std::vector<SequenceKv> blocks(2);
    write(p, gpu, blocks, 0, ctx, {}, -1);
    ASSERT_TRUE(p.kv->reserve(blocks[1], 100).ok());
    std::vector<SequenceKv*> ptrs = {&blocks[0], &blocks[1]};
    std::vector<BatchToken> batch;
    ASSERT_TRUE(p.kv->reserve(blocks[0], 41).ok());
    for (int i = 0; i < 100; ++i) batch.push_back({own[static_cast<size_t>(i)], i, 1, i == 49 || i == 99, 0});
    batch.push_back({ctx[7], 40, 0, true, -1});
    std::vector<float> logits(3 * static_cast<size_t>(V));
    const Status st = forward_on(p, gpu ? p.gpu_runner.get() : nullptr, batch, ptrs, logits.data(), views);
    ASSERT_TRUE(st.ok()) << st.error().to_string();
    (gpu ? got : want) = logits;
    for (auto& b : blocks) p.kv->release(b);
  }
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> g(got.begin() + r * V, got.begin() + (r + 1) * V),
        w(want.begin() + r * V, want.begin() + (r + 1) * V);
    const double err = rel_l2(g, w);
    std::printf("  tiled prefill, logits row %d: rel L2 %.3e vs the CPU\n", r, err);
    EXPECT_LT(err, 3e-2);
    expect_same_pick(g, w, 0.02);
  }
}

// A hybrid writer whose view puts blocks after it (Hogwild!-style: [own, others...]): each
// token's output reads the writer's state carried through the later blocks, their first tokens
// convolved with the writer's inputs so far. Against the CPU (which reads them through the
// query): a prefill, a decode token, then a step where the last later block grows too (the
// writer reads it as the step found it). Two cases on the tiny model (dk 16, conv 4): one later
// block of 20 tokens after a 6-token prefill; and later blocks of 2 tokens (all head: the
// writer's tail decides all of its part) and 19, after a 22-token prefill that folds inside the
// layer, with the 19-token block's growth folding its full buffer before the step. The later
// blocks must matter: the CPU's logits without them differ by far more than the bound.
void blocks_after_the_writer(const std::vector<int>& others, int own_n) {
  Pair p;
  const std::string why = load(goldens("tiny_qwen35.gguf"), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner);
  const auto own = random_tokens(*p.model, own_n, 72);
  std::vector<std::vector<TokenId>> other;
  View view = {0};
  for (size_t i = 0; i < others.size(); ++i) {
    other.push_back(random_tokens(*p.model, others[i], 73 + static_cast<uint32_t>(i)));
    view.push_back(static_cast<int32_t>(i + 1));
  }
  const int last = static_cast<int>(others.size());
  std::vector<std::vector<float>> out[2];
  for (const bool gpu : {false, true}) {
    std::vector<SequenceKv> blocks(others.size() + 1);  // 0 the writer, then the blocks after it
    for (int i = 1; i <= last; ++i) write(p, gpu, blocks, i, other[static_cast<size_t>(i - 1)], {}, -1);
    out[gpu].push_back(write(p, gpu, blocks, 0, own, {view}, 0));
    out[gpu].push_back(write(p, gpu, blocks, 0, {own[1]}, {view}, 0));
    ASSERT_TRUE(p.kv->reserve(blocks[0], own_n + 2).ok());
    ASSERT_TRUE(p.kv->reserve(blocks[static_cast<size_t>(last)], others.back() + 1).ok());
    const std::vector<BatchToken> both = {{own[2], own_n + 1, 0, true, 0},
                                          {own[3], others.back(), last, true, -1}};
    std::vector<SequenceKv*> ptrs;
    for (auto& blk : blocks) ptrs.push_back(&blk);
    std::vector<float> logits(2 * static_cast<size_t>(p.model->config.n_vocab));
    const std::vector<View> views = {view};
    const Status st = forward_on(p, gpu ? p.gpu_runner.get() : nullptr, both, ptrs, logits.data(), views);
    ASSERT_TRUE(st.ok()) << st.error().to_string();
    out[gpu].push_back(std::vector<float>(logits.begin(), logits.begin() + p.model->config.n_vocab));
    for (auto& blk : blocks) p.kv->release(blk);
  }
  for (size_t i = 0; i < out[0].size(); ++i) {
    const double err = rel_l2(out[1][i], out[0][i]);
    std::printf("  blocks after the writer, write %zu: rel L2 %.3e vs the CPU\n", i, err);
    EXPECT_LT(err, 3e-2);
    expect_same_pick(out[1][i], out[0][i], 0.02);
  }
  std::vector<SequenceKv> alone(1);  // the writer's prefill without the later blocks, on the CPU
  const double without = rel_l2(write(p, false, alone, 0, own, {}, -1), out[0][0]);
  std::printf("  the writer's prefill without the later blocks differs by rel L2 %.3e\n", without);
  EXPECT_GT(without, 0.1);
  p.kv->release(alone[0]);
}
TEST(CudaRunner, HybridViewWithABlockAfterTheWriterMatchesTheCpu) {
  blocks_after_the_writer({20}, 6);
}
TEST(CudaRunner, HybridViewWithTwoBlocksAfterTheWriterMatchesTheCpu) {
  blocks_after_the_writer({2, 19}, 22);
}

// AsyncLLM's writers reading a live thinker: each step the thinker (view [prompt, thinker])
// writes a token while writer A (view [prompt, thinker, A]) and writer B (view [thinker, B], no
// base) write one each, so their views change every step and the device reads them through the
// tokens' queries (chain reads), A's 40-token prompt composed once as its base. 26 steps: the
// writers' own blocks grow from empty (their head tokens convolved through the thinker's tail)
// past a full buffer (summaries read with A and B), and the thinker's too. At step 9 the thinker
// idles, so the writers compose their views; at step 10 their views are the ones they composed
// (the thinker's new token is not seen until step 11), so they step their cached states; at
// step 11 A's base must be composed again (the device keeps it where a composed view goes).
// Every row of every step against the CPU runner (which reads chains too), on the GPU with chain
// reads (48 of them, all in graphs) and without them (composing each view each step). The
// thinker must matter: on the CPU, A's last row without it differs.
TEST(CudaRunner, HybridChainReadsMatchTheCpu) {
  Pair p;
  const std::string why = load(goldens("tiny_qwen35.gguf"), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(p.gpu_runner);
  auto composing = CudaRunner::create(p.model->config, p.model->weights, *p.gpu,
                                      {.max_tokens = 128, .n_pages = kPages, .chain_reads = false});
  ASSERT_TRUE(composing.ok()) << composing.error().to_string();
  constexpr int kSteps = 26, kIdle = 9;
  const auto prompt = random_tokens(*p.model, 40, 81), think = random_tokens(*p.model, 5 + kSteps, 82);
  const auto wa = random_tokens(*p.model, kSteps, 83), wb = random_tokens(*p.model, kSteps, 84);
  const size_t V = static_cast<size_t>(p.model->config.n_vocab);
  // Runs 0..2: the CPU, the GPU with chain reads, the GPU composing; 3: the CPU, A blind to the thinker.
  CudaRunner* on[4] = {nullptr, p.gpu_runner.get(), composing->get(), nullptr};
  std::vector<std::vector<float>> out[4];
  for (int k = 0; k < 4; ++k) {
    const std::vector<View> views = {{0, 1}, k == 3 ? View{0, 2} : View{0, 1, 2}, {1, 3}};
    std::vector<SequenceKv> blocks(4);  // prompt, thinker, A, B
    std::vector<SequenceKv*> ptrs;
    for (auto& b : blocks) ptrs.push_back(&b);
    write_on(p, on[k], blocks, 0, prompt, {}, -1);
    write_on(p, on[k], blocks, 1, std::vector<TokenId>(think.begin(), think.begin() + 5), views, 0);
    for (int s = 0; s < kSteps; ++s) {
      std::vector<BatchToken> batch;
      if (s != kIdle)
        batch.push_back(
            {think[5 + static_cast<size_t>(s)], static_cast<int32_t>(blocks[1].n_tokens), 1, true, 0});
      batch.push_back({wa[static_cast<size_t>(s)], static_cast<int32_t>(blocks[2].n_tokens), 2, true, 1});
      batch.push_back({wb[static_cast<size_t>(s)], static_cast<int32_t>(blocks[3].n_tokens), 3, true, 2});
      for (const BatchToken& t : batch)
        ASSERT_TRUE(p.kv->reserve(blocks[static_cast<size_t>(t.seq)], t.pos + 1).ok());
      std::vector<float> logits(batch.size() * V);
      const Status st = forward_on(p, on[k], batch, ptrs, logits.data(), views);
      ASSERT_TRUE(st.ok()) << "run " << k << ", step " << s << ": " << st.error().to_string();
      out[k].push_back(std::move(logits));
    }
    for (auto& b : blocks) p.kv->release(b);
  }
  for (int k = 1; k <= 2; ++k) {
    double worst = 0;
    for (size_t s = 0; s < out[0].size(); ++s)
      for (size_t r = 0; r * V < out[0][s].size(); ++r) {
        const std::vector<float> g(out[k][s].begin() + static_cast<long>(r * V),
                                   out[k][s].begin() + static_cast<long>((r + 1) * V));
        const std::vector<float> w(out[0][s].begin() + static_cast<long>(r * V),
                                   out[0][s].begin() + static_cast<long>((r + 1) * V));
        const double err = rel_l2(g, w);
        worst = std::max(worst, err);
        EXPECT_LT(err, 3e-2) << "step " << s << ", row " << r;
        expect_same_pick(g, w, 0.02);
      }
    std::printf("  live thinker, %s: largest rel L2 %.3e vs the CPU over %d steps\n",
                k == 1 ? "chain reads" : "composed views", worst, kSteps);
  }
  const CudaRunner::ChainReads reads = p.gpu_runner->chain_reads();
  EXPECT_EQ(reads.reads, 2 * (kSteps - 2));  // A and B, every step but the idle one and the next
  EXPECT_EQ(reads.graphed, reads.reads) << p.gpu_runner->describe();  // chain steps are graphed
  EXPECT_EQ((*composing)->chain_reads().reads, 0);
  const std::vector<float> a(out[0].back().begin() + static_cast<long>(V),
                             out[0].back().begin() + static_cast<long>(2 * V));
  const std::vector<float> blind(out[3].back().begin() + static_cast<long>(V),
                                 out[3].back().begin() + static_cast<long>(2 * V));
  const double without = rel_l2(blind, a);
  std::printf("  writer A's last row without the thinker in its view differs by rel L2 %.3e\n", without);
  EXPECT_GT(without, 0.1);
  composing->reset();  // before the runner created first
}

// What `--device auto` asks before it picks the GPU: no device needed, so this runs everywhere.
// Every tiny model runs; shapes and types the kernels do not take are refused by name.
TEST(CudaRunner, CheckSaysWhatItRunsWithoutADevice) {
  std::map<std::string, std::unique_ptr<Model>> models;
  for (const char* f : {"tiny_llama_f32.gguf", "tiny_llama.gguf", "tiny_qwen2.gguf", "tiny_qwen3.gguf",
                        "tiny_qwen35.gguf", "tiny_qwen35moe.gguf", "tiny_qwen3next_f32.gguf"}) {
    auto m = Model::load(goldens(f));
    ASSERT_TRUE(m.ok()) << f;
    const Status st = CudaRunner::check((*m)->config, (*m)->weights);
    EXPECT_TRUE(st.ok()) << f << ": " << st.error().message;
    models[f] = std::move(*m);
  }
  auto refused = [](ModelConfig c, const Weights& w, const std::string& want) {
    const Status st = CudaRunner::check(c, w);
    ASSERT_FALSE(st.ok()) << want;
    EXPECT_NE(st.error().message.find(want), std::string::npos) << st.error().message;
  };
  Model& hybrid = *models["tiny_qwen35.gguf"];
  const Model& moe = *models["tiny_qwen35moe.gguf"];
  ModelConfig c = hybrid.config;
  c.gdn.head_dim = 48;
  refused(c, hybrid.weights, "Gated DeltaNet heads of 48");
  c = moe.config;
  c.n_expert = 64;  // (the check reads the config's counts; the weights' 4 experts are not reached)
  c.n_expert_used = 17;
  refused(c, moe.weights, "choosing 17 of 64 experts");
  c.n_expert = 1025;
  c.n_expert_used = 2;
  refused(c, moe.weights, "choosing 2 of 1025 experts");
  hybrid.weights.token_embd.type = TensorType::iq2_xxs;  // (the model is not used again)
  refused(hybrid.config, hybrid.weights, "cannot convert token_embd (IQ2_XXS)");
  // Gemma 3 runs on the CPU only for now.
  auto gemma = Model::load(goldens("tiny_gemma3_f32.gguf"));
  ASSERT_TRUE(gemma.ok());
  refused((*gemma)->config, (*gemma)->weights, "does not run Gemma 3's sliding-window layers");
  // The quantized types the CPU reads convert, Q2_K and IQ4_XS among them.
  for (const char* f : {"tiny_llama_q23k.gguf", "tiny_llama_iq4.gguf"}) {
    auto m = Model::load(goldens(f));
    ASSERT_TRUE(m.ok()) << f;
    const Status st = CudaRunner::check((*m)->config, (*m)->weights);
    EXPECT_TRUE(st.ok()) << f << ": " << st.error().message;
  }
}

// create() refuses what check() refuses, before it allocates anything.
TEST(CudaRunner, RefusesWhatItDoesNotRunYet) {
  Pair p;
  const std::string why = load(goldens("tiny_qwen35.gguf"), &p);
  if (!why.empty()) GTEST_SKIP() << why;
  ModelConfig c = p.model->config;
  c.gdn.head_dim = 48;
  const int64_t used = p.gpu->pool_used();
  auto r = CudaRunner::create(c, p.model->weights, *p.gpu, {.max_tokens = 8, .n_pages = 8});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("Gated DeltaNet heads of 48"), std::string::npos) << r.error().message;
  EXPECT_EQ(p.gpu->pool_used(), used);
}

}  // namespace
}  // namespace chorus
