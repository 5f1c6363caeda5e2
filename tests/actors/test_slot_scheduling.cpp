// Scheduling by linear-state slots (docs/scheduling.md): on a hybrid model whose node counts
// slots (a GPU's, or a CPU limit), more programs than the slots hold all finish — the scheduler
// pauses and restores them by slots as by pages — with the outputs of a node with room for all.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "actors/program_manager.h"
#include "tests/support/actors_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

constexpr int kPrograms = 5, kTurns = 4, kSlots = 4;  // programs of 2 blocks: 2 resident at once

struct SlotOutcome {
  std::map<int, std::vector<TokenId>> tokens;  // per program, every turn's generated tokens
  int errors = 0;
  std::string first_error;
  ProgramManagerStats stats;
};

class SlotScheduling : public ActorsFixture {
 protected:
  // kPrograms programs, each a prompt block and an answer block written under [prompt, answer],
  // run at once: per turn a few tokens into the prompt, then a generate of 6 into the answer,
  // then a "tool call" of 30 ms. `slots`: the node's limit (0: none); `mode`: how pauses keep
  // the blocks (the policy chooses offload while host memory has room).
  SlotOutcome run_programs(int slots, bool offload) {
    SlotOutcome out;
    start(test::goldens_dir() + "/tiny_qwen35.gguf", 512, slots);
    run_on_node(slots, offload, out);
    TearDown();  // the next run starts a node of its own
    return out;
  }
  void run_on_node(int slots, bool offload, SlotOutcome& out) {
    caf::scoped_actor self{*sys};
    std::vector<std::pair<BlockId, BlockId>> blocks;
    for (int p = 1; p <= kPrograms; ++p) {
      const BlockId prompt = new_block(self, "prompt" + std::to_string(p));
      const BlockId answer = new_block(self, "answer" + std::to_string(p));
      blocks.emplace_back(prompt, answer);
      EXPECT_EQ(
          program_cmd(self, ProgramCmd::Op::register_program, p, {prompt, answer}, PauseMode::drop, true)
              .kind,
          ReplyKind::program_status);
    }
    ProgramPolicyOptions po;
    po.capacity_pages = 512;
    po.check_period_s = 0.02;
    po.decay_tau_s = 0.01;
    po.host_capacity_pages = offload ? 4096 : 0;
    ProgramManager mgr(*sys, batcher, po);
    for (int p = 1; p <= kPrograms; ++p) mgr.add(p, 1);
    std::mutex m;
    std::vector<std::thread> roles;
    for (int p = 0; p < kPrograms; ++p)
      roles.emplace_back([&, p] {
        caf::scoped_actor me{*sys};
        auto fail = [&](const std::string& why) {
          std::lock_guard<std::mutex> l(m);
          ++out.errors;
          if (out.first_error.empty()) out.first_error = why;
        };
        const auto [prompt, answer] = blocks[static_cast<size_t>(p)];
        for (int turn = 0; turn < kTurns; ++turn) {
          std::vector<TokenId> text(static_cast<size_t>(3 + (p + turn) % 4),
                                    static_cast<TokenId>(5 + p * 3 + turn));
          Reply sub = call(me, encode_request(0, Request::forward(prompt, text, {prompt})));
          if (sub.kind != ReplyKind::submitted) return fail(sub.text);
          for (const Reply& e : events_until_finished(me))
            if (e.kind == ReplyKind::finished && e.reason == FinishReason::error) return fail(e.text);
          StopCondition stop;
          stop.max_tokens = 6;
          stop.at_end_of_generation = false;
          sub = call(
              me, encode_request(0, Request::generate(answer, {prompt, answer}, {static_cast<TokenId>(9 + p)},
                                                      SamplingParams::greedy(), stop)));
          if (sub.kind != ReplyKind::submitted) return fail(sub.text);
          std::vector<TokenId> got;
          for (const Reply& e : events_until_finished(me)) {
            if (e.kind == ReplyKind::token && e.token >= 0) got.push_back(e.token);
            if (e.kind == ReplyKind::finished && e.reason != FinishReason::max_tokens)
              return fail(std::string(finish_reason_name(e.reason)) + ": " + e.text);
          }
          {
            std::lock_guard<std::mutex> l(m);
            auto& all = out.tokens[p];
            all.insert(all.end(), got.begin(), got.end());
          }
          mgr.tool_started(p + 1);
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          mgr.tool_ended(p + 1);
        }
      });
    for (auto& r : roles) r.join();
    out.stats = mgr.stats();
    EXPECT_EQ(mgr.options().policy.capacity_slots, slots) << "the scheduler learns the node's slots";
  }
};

TEST_F(SlotScheduling, MoreHybridProgramsThanSlotsAllFinishWithTheSameOutputs) {
  const SlotOutcome room = run_programs(0, true);
  ASSERT_EQ(room.errors, 0) << room.first_error;
  for (const bool offload : {true, false}) {
    SCOPED_TRACE(offload ? "pauses offload" : "pauses drop");
    const SlotOutcome tight = run_programs(kSlots, offload);
    EXPECT_EQ(tight.errors, 0) << tight.first_error;
    EXPECT_GT(tight.stats.pauses, 0) << "the slots were never short: the test does not test the scheduler";
    EXPECT_EQ(tight.stats.offloaded_pauses > 0, offload);
    ASSERT_EQ(tight.tokens.size(), static_cast<size_t>(kPrograms));
    for (int p = 0; p < kPrograms; ++p) {
      EXPECT_EQ(tight.tokens.at(p).size(), static_cast<size_t>(6 * kTurns));
      EXPECT_EQ(tight.tokens.at(p), room.tokens.at(p)) << "program " << p + 1;
    }
  }
}

}  // namespace
}  // namespace chorus
