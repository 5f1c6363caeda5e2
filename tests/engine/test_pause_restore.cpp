// Pausing and restoring blocks (ThunderAgent's pause/restore, engine level): KV pages are freed
// and rebuilt, no token is lost, and the model sees the same cache afterwards.
// Built twice: into chorus_tests (CPU engine) and, with CHORUS_ENGINE_ON_GPU, into
// chorus_gpu_tests, where the same tests run an engine on the CUDA runner (its pages offloaded
// and copied by the device) and skip without a device.
#include <gtest/gtest.h>

#include <random>

#include "device/cpu_device.h"
#include "device/cuda_device.h"
#include "engine/step/engine.h"
#include "tests/support/engine_gpu.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

// Run on an attention-only model and on a hybrid one (qwen35: the linear layers' block states
// are dropped and rebuilt, or kept in host memory, with the KV pages).
class PauseRestore : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
#ifdef CHORUS_ENGINE_ON_GPU
    if (auto why = test::engine_gpu(&gpu_)) GTEST_SKIP() << *why;
#endif
    // "FILE@f16": the same on an f16 KV cache.
    const std::string param = GetParam();
    const size_t at = param.find('@');
    ASSERT_NO_FATAL_FAILURE(
        test::load_model(test::goldens_dir() + "/" + param.substr(0, at), &model_, &device_));
    if (at != std::string::npos) {
      CpuDeviceOptions opts;
      opts.kv_type = *parse_kv_type(param.substr(at + 1));
      auto d = CpuDevice::create(opts);
      ASSERT_TRUE(d.ok()) << d.error().to_string();
      device_ = std::move(*d);
    }
    auto e = Engine::create(*model_, *device_, {.n_pages = 256, .token_budget = 32}, gpu_.get());
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    engine_ = std::move(*e);
  }
  std::vector<TokenId> toks(int n) {
    std::uniform_int_distribution<int> d(0, model_->config.n_vocab - 3);
    std::vector<TokenId> v(static_cast<size_t>(n));
    for (auto& t : v) t = d(rng_);
    return v;
  }
  void run() {
    for (int i = 0; i < 1000 && !engine_->idle(); ++i) ASSERT_TRUE(engine_->step().ok());
    ASSERT_TRUE(engine_->idle());
  }
  std::vector<float> probe(std::vector<BlockId> view) {
    auto id = engine_->submit(Request::probe(std::move(view), question_, {{1}, {2}, {3}, {4, 5}}));
    EXPECT_TRUE(id.ok()) << id.error().to_string();
    std::vector<float> p;
    for (int i = 0; i < 100 && !engine_->idle(); ++i) {
      const auto events = engine_->step();
      EXPECT_TRUE(events.ok());
      for (const Event& e : *events)
        if (e.type == Event::Type::probe_result) p = e.probabilities;
    }
    return p;
  }
  Request generate(BlockId w, std::vector<BlockId> view, int n) {
    StopCondition stop;
    stop.max_tokens = n;
    stop.at_end_of_generation = false;
    return Request::generate(w, std::move(view), {3}, SamplingParams::greedy(), stop);
  }
  // A program: prompt block, then a thinker that writes under [prompt], then a writer under
  // [prompt, thoughts] — written one after another.
  std::vector<BlockId> sequential_program() {
    const BlockId p = engine_->blocks().create("prompt"), t = engine_->blocks().create("thoughts"),
                  w = engine_->blocks().create("answer");
    EXPECT_TRUE(engine_->submit(Request::forward(p, toks(37))).ok());
    run();
    EXPECT_TRUE(engine_->submit(generate(t, {p}, 20)).ok());
    run();
    EXPECT_TRUE(engine_->submit(generate(w, {p, t}, 9)).ok());
    run();
    return {p, t, w};
  }
  // Two generates writing at the same time, each seeing the other's block live (Hogwild!).
  std::vector<BlockId> hogwild_program() {
    const BlockId p = engine_->blocks().create("prompt"), a = engine_->blocks().create("a"),
                  b = engine_->blocks().create("b");
    EXPECT_TRUE(engine_->submit(Request::forward(p, toks(20))).ok());
    run();
    EXPECT_TRUE(engine_->submit(generate(a, {p, a, b}, 15)).ok());
    EXPECT_TRUE(engine_->submit(generate(b, {p, b, a}, 15)).ok());
    run();
    return {p, a, b};
  }
  std::vector<std::vector<TokenId>> logs(const std::vector<BlockId>& ids) {
    std::vector<std::vector<TokenId>> out;
    for (BlockId id : ids) out.push_back((*engine_->blocks().get(id))->tokens);
    return out;
  }

  std::mt19937 rng_{99};
  std::vector<TokenId> question_ = {7, 8, 9};
  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<CudaDevice> gpu_;  // the engine's device where set (outlives the engine)
  std::unique_ptr<Engine> engine_;
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::max(std::fabs(want[i]), 1e-3f)) << i;
}

// A restore that does not fit changes nothing: the blocks stay paused, their tokens whole, and
// the same restore succeeds, exactly, once there is room.
TEST_P(PauseRestore, ARestoreWithoutRoomIsRefusedWhole) {
  const auto ids = sequential_program();
  const auto before = probe(ids);
  const auto tokens = logs(ids);
  ASSERT_TRUE(engine_->pause(ids, PauseMode::drop).ok());
  // Fill the cache with another block until fewer pages are free than the program needs.
  const BlockId filler = engine_->blocks().create("filler");
  const int64_t keep_free = 2;
  ASSERT_TRUE(engine_
                  ->submit(Request::forward(
                      filler, toks(static_cast<int>((engine_->blocks().kv().n_free() - keep_free) * 16))))
                  .ok());
  run();
  ASSERT_EQ(engine_->blocks().kv().n_free(), keep_free);
  const Status s = engine_->restore(ids);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::out_of_memory);
  EXPECT_NE(s.error().message.find("nothing was restored"), std::string::npos) << s.error().message;
  EXPECT_EQ(engine_->blocks().kv().n_free(), keep_free);
  for (BlockId id : ids) EXPECT_TRUE((*engine_->blocks().get(id))->paused);
  EXPECT_EQ(logs(ids), tokens);
  ASSERT_TRUE(engine_->blocks().free(filler).ok());
  ASSERT_TRUE(engine_->restore(ids).ok());
  expect_close(probe(ids), before, 1e-4f);
}

TEST_P(PauseRestore, DropAndRebuildASequentialProgram) {
  const auto ids = sequential_program();
  const auto before = probe(ids);
  const auto tokens = logs(ids);
  const int64_t free_before = engine_->blocks().kv().n_free();
  ASSERT_TRUE(engine_->pause(ids, PauseMode::drop).ok());
  EXPECT_GT(engine_->blocks().kv().n_free(), free_before) << "pausing frees the pages";
  EXPECT_EQ(logs(ids), tokens) << "no token is lost";
  ASSERT_TRUE(engine_->restore(ids).ok());
  EXPECT_EQ(engine_->blocks().kv().n_free(), free_before);
  EXPECT_EQ(logs(ids), tokens);
  expect_close(probe(ids), before, 1e-4f);
}

TEST_P(PauseRestore, OffloadIsExactEvenForAConcurrentlyWrittenProgram) {
  const auto ids = hogwild_program();
  const auto before = probe(ids);
  const auto tokens = logs(ids);
  ASSERT_TRUE(engine_->pause(ids, PauseMode::offload).ok());
  ASSERT_TRUE(engine_->restore(ids).ok());
  EXPECT_EQ(logs(ids), tokens);
  EXPECT_EQ(probe(ids), before) << "offload must be bit-exact";
}

TEST_P(PauseRestore, DropRebuildsAConcurrentlyWrittenProgramFromItsRecordedViews) {
  const auto ids = hogwild_program();
  const auto before = probe(ids);
  ASSERT_TRUE(engine_->pause(ids, PauseMode::drop).ok());
  ASSERT_TRUE(engine_->restore(ids).ok());
  expect_close(probe(ids), before, 1e-4f);
}

TEST_P(PauseRestore, RefusalsChangeNothing) {
  const auto ids = sequential_program();
  // A request still using a block.
  ASSERT_TRUE(engine_->submit(Request::forward(ids[2], toks(40))).ok());
  auto st = engine_->pause(ids, PauseMode::drop);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("pending request(s) use it"), std::string::npos);
  EXPECT_FALSE((*engine_->blocks().get(ids[0]))->paused) << "a refused pause pauses nothing";
  run();
  // Restoring a block without the paused block it was written under.
  ASSERT_TRUE(engine_->pause(ids, PauseMode::drop).ok());
  const BlockId only_answer[] = {ids[2]};
  st = engine_->restore(only_answer);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("which is paused; restore both together"), std::string::npos)
      << st.error().message;
  // New requests cannot name a paused block.
  auto r = engine_->submit(Request::probe({ids[0]}, {1}, {{1}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("is paused"), std::string::npos);
  ASSERT_TRUE(engine_->restore(ids).ok());
  // Merged blocks share pages: pause their sources instead.
  auto m = engine_->blocks().merge(ids[0], ids[1]);
  ASSERT_TRUE(m.ok());
  const BlockId merged[] = {*m};
  st = engine_->pause(merged, PauseMode::drop);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::unsupported);
}

#ifdef CHORUS_ENGINE_ON_GPU
// On the CUDA runner: attention models and a Gated DeltaNet hybrid (its per-block summaries kept
// on the device, tests/gpu/test_cuda_runner.cpp).
INSTANTIATE_TEST_SUITE_P(Gpu, PauseRestore,
                         ::testing::Values("tiny_llama_f32.gguf", "tiny_qwen3.gguf", "tiny_qwen35.gguf"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('.')); });
#else
INSTANTIATE_TEST_SUITE_P(Models, PauseRestore,
                         ::testing::Values("tiny_llama_f32.gguf", "tiny_qwen35.gguf",
                                           "tiny_llama_f32.gguf@f16"),
                         [](const auto& info) {
                           const std::string& p = info.param;
                           return p.substr(0, p.find('.')) +
                                  (p.find("@f16") != std::string::npos ? "_f16kv" : "");
                         });
#endif

}  // namespace
}  // namespace chorus
