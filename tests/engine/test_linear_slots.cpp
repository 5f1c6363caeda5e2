// Linear-state slots (engine/forward/linear_slots.h) on a hybrid model: a limit the engine keeps
// (a request that finds none ends with a message naming the option; the others run on), a paused
// block holds none, a restore takes them back or is refused whole, and the outputs are those of an
// engine with no limit.
// Built twice: into chorus_tests_engine (CPU engine: slots counted) and, with CHORUS_ENGINE_ON_GPU,
// into chorus_gpu_tests, where the slots are the CUDA runner's device slots (an offload copies a
// block's state out of its slot and back) and the tests skip without a device.
#include <gtest/gtest.h>

#include <random>

#include "device/cpu_device.h"
#include "device/cuda_device.h"
#include "engine/forward/linear_slots.h"
#include "engine/step/engine.h"
#include "tests/support/engine_gpu.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

class LinearSlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef CHORUS_ENGINE_ON_GPU
    if (auto why = test::engine_gpu(&gpu_)) GTEST_SKIP() << *why;
#endif
    ASSERT_NO_FATAL_FAILURE(test::load_model(test::goldens_dir() + "/tiny_qwen35.gguf", &model_, &device_));
  }
  std::unique_ptr<Engine> engine(int slots) {
    auto e = Engine::create(*model_, *device_, {.n_pages = 256, .token_budget = 32, .linear_slots = slots},
                            gpu_.get());
    EXPECT_TRUE(e.ok()) << e.error().to_string();
    return e.ok() ? std::move(*e) : nullptr;
  }
  static Request generate(BlockId w, std::vector<BlockId> view, TokenId first, int n) {
    StopCondition stop;
    stop.max_tokens = n;
    stop.at_end_of_generation = false;
    return Request::generate(w, std::move(view), {first}, SamplingParams::greedy(), stop);
  }
  // Steps until idle; the finish events' errors by request.
  static std::map<RequestId, std::string> run(Engine& e) {
    std::map<RequestId, std::string> errors;
    for (int i = 0; i < 1000 && !e.idle(); ++i) {
      auto events = e.step();
      EXPECT_TRUE(events.ok());
      if (!events.ok()) break;
      for (const Event& ev : *events)
        if (ev.type == Event::Type::finished && ev.reason == FinishReason::error)
          errors[ev.request] = ev.error;
    }
    EXPECT_TRUE(e.idle());
    return errors;
  }
  static std::vector<TokenId> log(Engine& e, BlockId b) {
    return (*e.blocks().get(b))->tokens;
  }
  // A prompt of 21 tokens and a thinker of 12 under it: two slots.
  static std::pair<BlockId, BlockId> program(Engine& e, TokenId seed) {
    const BlockId p = e.blocks().create("prompt"), t = e.blocks().create("thoughts");
    std::vector<TokenId> prompt(21);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(3 + (seed * 7 + i * 5) % 40);
    EXPECT_TRUE(e.submit(Request::forward(p, prompt)).ok());
    EXPECT_TRUE(run(e).empty());
    EXPECT_TRUE(e.submit(generate(t, {p, t}, seed, 12)).ok());
    EXPECT_TRUE(run(e).empty());
    return {p, t};
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<CudaDevice> gpu_;  // the engines' device where set (outlives them)
};

TEST_F(LinearSlotsTest, TheLimitIsKeptAndNamedAndSlotsComeBack) {
  auto e = engine(3);
  ASSERT_TRUE(e);
  ASSERT_NE(e->linear_slots(), nullptr);
  EXPECT_EQ(e->linear_slots()->capacity(), 3);
  const auto [p, t] = program(*e, 5);
  EXPECT_EQ(e->linear_slots()->in_use(), 2);
  // Two new blocks written in one step: the first takes the last slot, the second ends with a
  // message naming the option; the first runs on whole.
  const BlockId a = e->blocks().create("a"), b = e->blocks().create("b");
  auto ra = e->submit(generate(a, {p, a}, 7, 6));
  auto rb = e->submit(generate(b, {p, b}, 8, 6));
  ASSERT_TRUE(ra.ok() && rb.ok());
  auto errors = run(*e);
  ASSERT_EQ(errors.size(), 1u);
  ASSERT_TRUE(errors.count(*rb));
  EXPECT_NE(errors[*rb].find("all 3 linear-state slots are in use"), std::string::npos) << errors[*rb];
  EXPECT_NE(errors[*rb].find("--linear-slots"), std::string::npos) << errors[*rb];
  EXPECT_EQ(log(*e, a).size(), 7u);
  EXPECT_EQ(e->linear_slots()->in_use(), 3);
  // A freed block gives its slot back; the refused request, sent again, runs.
  ASSERT_TRUE(e->blocks().free(a).ok());
  EXPECT_EQ(e->linear_slots()->in_use(), 2);
  ASSERT_TRUE(e->blocks().clear(b).ok());
  ASSERT_TRUE(e->submit(generate(b, {p, b}, 8, 6)).ok());
  EXPECT_TRUE(run(*e).empty());
  EXPECT_EQ(log(*e, b).size(), 7u);
}

// Paused blocks hold no slot (offloaded: the state waits in host memory; dropped: it is rebuilt);
// a restore without slots for all is refused and changes nothing; the outputs after the restore
// are an unlimited engine's (offload: the same tokens; drop: the same greedy tokens here).
TEST_F(LinearSlotsTest, PausedBlocksHoldNoSlotAndRestoresTakeThemBack) {
  for (const PauseMode mode : {PauseMode::offload, PauseMode::drop}) {
    SCOPED_TRACE(mode == PauseMode::offload ? "offload" : "drop");
    auto free_run = engine(0);
    auto e = engine(3);
    ASSERT_TRUE(e && free_run);
#ifdef CHORUS_ENGINE_ON_GPU
    ASSERT_NE(free_run->linear_slots(), nullptr) << "a GPU always has slots";
#else
    EXPECT_EQ(free_run->linear_slots(), nullptr) << "on the CPU, 0 is no limit";
#endif
    const auto [p, t] = program(*e, 5);
    const auto [fp, ft] = program(*free_run, 5);
    ASSERT_EQ(log(*e, t), log(*free_run, ft));
    const BlockId ids[] = {p, t};
    ASSERT_TRUE(e->pause(ids, mode).ok());
    EXPECT_EQ(e->linear_slots()->in_use(), 0);
    // Another program takes two of the three slots: the restore, needing two, is refused whole.
    const auto [q, u] = program(*e, 9);
    EXPECT_EQ(e->linear_slots()->in_use(), 2);
    Status st = e->restore(ids);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, Errc::out_of_memory);
    EXPECT_NE(st.error().message.find("linear-state slots full"), std::string::npos) << st.error().message;
    EXPECT_NE(st.error().message.find("nothing was restored"), std::string::npos) << st.error().message;
    EXPECT_TRUE((*e->blocks().get(p))->paused);
    EXPECT_TRUE((*e->blocks().get(t))->paused);
    EXPECT_EQ(e->linear_slots()->in_use(), 2);
    const BlockId others[] = {q, u};
    ASSERT_TRUE(e->pause(others, PauseMode::offload).ok());
    ASSERT_TRUE(e->restore(ids).ok());
    EXPECT_EQ(e->linear_slots()->in_use(), 2);
    // The thinker goes on where it was: the same tokens as on the engine that never paused.
    ASSERT_TRUE(e->submit(generate(t, {p, t}, 11, 10)).ok());
    ASSERT_TRUE(free_run->submit(generate(ft, {fp, ft}, 11, 10)).ok());
    EXPECT_TRUE(run(*e).empty());
    EXPECT_TRUE(run(*free_run).empty());
    EXPECT_EQ(log(*e, t), log(*free_run, ft));
  }
}

}  // namespace
}  // namespace chorus
