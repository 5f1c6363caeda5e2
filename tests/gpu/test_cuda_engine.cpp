// The engine on the CUDA runner (label gpu; skipped without a device): the same requests give
// the CPU engine's answers within bf16 tolerance, a fork's first write copies its shared page on
// the device, leaving the source block as it was, and tokens drawn on the device are the ones
// the host would draw from the same logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <list>
#include <random>

#include "device/cpu_device.h"
#include "device/cuda_device.h"
#include "device/cuda_info.h"
#include "engine/step/engine.h"
#include "engine/step/generator.h"
#include "tests/support/bf16_weights.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

// The GPU engine over `model`; the CPU engine over `cpu_model`, the same file with its weights
// rounded to bf16 as the GPU holds them (tests/support/bf16_weights.h).
struct Engines {
  std::unique_ptr<Model> model, cpu_model;
  std::list<std::vector<float>> cpu_weights;
  std::unique_ptr<CpuDevice> cpu;
  std::unique_ptr<CudaDevice> gpu;
  std::unique_ptr<Engine> on_cpu, on_gpu;
};

// Both engines over a tiny model (the llama by default), or the reason they cannot run.
std::string make(Engines* e, const std::string& file = "tiny_llama_f32.gguf") {
  const CudaInfo info = cuda_info();
  if (info.device_count == 0) return "no CUDA device: " + info.error;
  test::load_model(test::goldens_dir() + "/" + file, &e->model, &e->cpu);
  auto cpu_model = Model::load(test::goldens_dir() + "/" + file);
  EXPECT_TRUE(cpu_model.ok());
  if (!cpu_model) return "";
  e->cpu_model = std::move(*cpu_model);
  test::round_weights_to_bf16(e->cpu_model->weights, &e->cpu_weights);
  auto gpu = CudaDevice::create({.device = 0, .pool_bytes = int64_t{2} << 30});
  EXPECT_TRUE(gpu.ok()) << gpu.error().to_string();
  if (!gpu) return "";
  e->gpu = std::move(*gpu);
  const EngineOptions o{.n_pages = 128, .token_budget = 32};
  auto c = Engine::create(*e->cpu_model, *e->cpu, o);
  auto g = Engine::create(*e->model, *e->cpu, o, e->gpu.get());
  EXPECT_TRUE(c.ok() && g.ok()) << (g.ok() ? "" : g.error().to_string());
  if (c) e->on_cpu = std::move(*c);
  if (g) e->on_gpu = std::move(*g);
  return "";
}

std::vector<TokenId> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(3, 200);
  std::vector<TokenId> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

void run(Engine& e) {
  for (int i = 0; i < 1000 && !e.idle(); ++i) ASSERT_TRUE(e.step().ok());
  ASSERT_TRUE(e.idle());
}

std::vector<float> probe(Engine& e, std::vector<BlockId> view) {
  auto id = e.submit(Request::probe(std::move(view), {7, 8, 9}, {{1}, {2}, {3}, {4, 5}, {11}, {12}}));
  EXPECT_TRUE(id.ok()) << id.error().to_string();
  std::vector<float> p;
  for (int i = 0; i < 100 && !e.idle(); ++i) {
    auto events = e.step();
    EXPECT_TRUE(events.ok());
    for (const Event& x : *events)
      if (x.type == Event::Type::probe_result) p = x.probabilities;
  }
  return p;
}

// A program written block by block: a prompt, thoughts under [prompt], an answer under
// [prompt, thoughts]; a probe over all three.
std::vector<BlockId> program(Engine& e) {
  const BlockId p = e.blocks().create("prompt"), t = e.blocks().create("thoughts"),
                w = e.blocks().create("answer");
  EXPECT_TRUE(e.submit(Request::forward(p, tokens(37, 1))).ok());
  run(e);
  EXPECT_TRUE(e.submit(Request::forward(t, tokens(21, 2), {p})).ok());
  run(e);
  EXPECT_TRUE(e.submit(Request::forward(w, tokens(9, 3), {p, t})).ok());
  run(e);
  return {p, t, w};
}

// The engine on the GPU, probes over a three-block program (on the hybrid model, each block's
// Gated DeltaNet state composed on the device from the blocks before it), against the CPU engine.
void probes_match(const std::string& file) {
  Engines e;
  const std::string why = make(&e, file);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(e.on_cpu && e.on_gpu);
  const auto want = probe(*e.on_cpu, program(*e.on_cpu));
  const auto got = probe(*e.on_gpu, program(*e.on_gpu));
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  std::printf("  probe probabilities, GPU engine vs CPU engine: max abs difference %.3e\n", worst);
  EXPECT_LT(worst, 2e-2) << "bf16 weights and activations on the GPU (an estimate; see the printed value)";
}
TEST(CudaEngine, ProbesMatchTheCpuEngine) {
  probes_match("tiny_llama_f32.gguf");
}
TEST(CudaEngine, HybridProbesMatchTheCpuEngine) {
  probes_match("tiny_qwen35.gguf");
}
TEST(CudaEngine, MixtureOfExpertsProbesMatchTheCpuEngine) {
  probes_match("tiny_qwen35moe.gguf");
}

// fork(a, 20) shares a's first two pages; writing the fork's position 20 (inside the second,
// shared page) copies that page on the device. The source block is unchanged, and the fork's
// contents equal a block written with the same tokens from scratch.
TEST(CudaEngine, AForkCopiesItsSharedPageOnTheDevice) {
  Engines e;
  const std::string why = make(&e);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(e.on_gpu);
  Engine& g = *e.on_gpu;
  const auto base = tokens(30, 4), more = tokens(6, 5);
  const BlockId a = g.blocks().create("a");
  ASSERT_TRUE(g.submit(Request::forward(a, base)).ok());
  run(g);
  const auto a_before = probe(g, {a});
  auto f = g.blocks().fork(a, 20, "fork");
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  const int64_t free_before = g.blocks().kv().n_free();
  ASSERT_TRUE(g.submit(Request::forward(*f, more)).ok());
  run(g);
  EXPECT_LT(g.blocks().kv().n_free(), free_before) << "the shared page was copied";
  EXPECT_EQ(probe(g, {a}), a_before) << "the source block is untouched";
  std::vector<TokenId> whole(base.begin(), base.begin() + 20);
  whole.insert(whole.end(), more.begin(), more.end());
  const BlockId fresh = g.blocks().create("fresh");
  ASSERT_TRUE(g.submit(Request::forward(fresh, whole)).ok());
  run(g);
  const auto got = probe(g, {*f}), want = probe(g, {fresh});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3) << i;
}

// Generates with temperature sampling, drawn on the device (only tokens come back) and on the
// host (every row of logits comes back), give the same tokens: the device sampler makes the
// host's draw (Sampler::plan_draw) with the host's filters. Also with the Generator.
TEST(CudaEngine, TokensDrawnOnTheDeviceAreTheHostsDraws) {
  Engines e;
  const std::string why = make(&e);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(e.on_gpu);
  auto host = Engine::create(*e.model, *e.cpu,
                             {.n_pages = 128, .token_budget = 32, .sample_on_device = false}, e.gpu.get());
  ASSERT_TRUE(host.ok()) << host.error().to_string();
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 40;
  sp.top_p = 0.95f;
  sp.min_p = 0.02f;
  sp.seed = 7;
  StopCondition stop;
  stop.max_tokens = 24;
  stop.at_end_of_generation = false;
  std::vector<std::vector<TokenId>> out;
  for (Engine* g : {e.on_gpu.get(), host->get()}) {
    const BlockId p = g->blocks().create("prompt"), a = g->blocks().create("a"), b = g->blocks().create("b");
    ASSERT_TRUE(g->submit(Request::forward(p, tokens(30, 9))).ok());
    run(*g);
    ASSERT_TRUE(g->submit(Request::generate(a, {p}, {5}, sp, stop)).ok());
    SamplingParams greedy = SamplingParams::greedy();
    ASSERT_TRUE(g->submit(Request::generate(b, {p, a}, {6}, greedy, stop)).ok());
    run(*g);
    std::vector<TokenId> both = (*g->blocks().get(a))->tokens;
    const auto& tb = (*g->blocks().get(b))->tokens;
    both.insert(both.end(), tb.begin(), tb.end());
    out.push_back(both);
    // A generate without prefill starts from the logits the finished one left.
    ASSERT_TRUE(g->submit(Request::generate(a, {p}, {}, greedy, stop)).ok());
    run(*g);
    EXPECT_EQ((*g->blocks().get(a))->tokens.size(), 1u + 24u + 24u);
  }
  EXPECT_EQ(out[0], out[1]);

  GenerateOptions go;
  go.n_ctx = 64;
  go.max_new_tokens = 20;
  go.stop_at_end_of_generation = false;
  go.sampling = sp;
  std::vector<std::vector<std::vector<TokenId>>> gen_out;
  for (const bool device : {true, false}) {
    go.sample_on_device = device;
    auto gen = Generator::create(*e.model, *e.cpu, 3, go, e.gpu.get());
    ASSERT_TRUE(gen.ok()) << gen.error().to_string();
    ASSERT_TRUE((*gen)->run(tokens(12, 10), nullptr).ok());
    gen_out.push_back((*gen)->outputs());
  }
  EXPECT_EQ(gen_out[0], gen_out[1]);
}

}  // namespace
}  // namespace chorus
