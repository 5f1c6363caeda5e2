// The node's two actors: the memory actor (the front door: programs, room, held requests) and
// the batcher (the step loop). What the split must not change: a requester sees its answer
// before its request's events, and whoever has seen an event is answered with its step counted.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <chrono>
#include <set>
#include <string>

#include "actors/atoms.h"
#include "actors/batcher.h"
#include "engine/step/engine.h"
#include "net/codec.h"
#include "tests/support/actors_fixture.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

struct OrderSeen {
  int finished = 0;
  int early = 0;  // events of a request whose Submitted had not come yet
};

// A client on the CAF scheduler (as the roles are): sends `n` probes at once, each answered in
// the next step, and counts events that came before their request's Submitted.
caf::behavior probing_client(caf::event_based_actor* self, caf::actor node, BlockId block, int n,
                             caf::actor report_to) {
  auto submitted = std::make_shared<std::set<int64_t>>();
  auto seen = std::make_shared<OrderSeen>();
  for (int i = 0; i < n; ++i)
    self->request(node, caf::infinite, frame_atom::value,
                  encode_request(static_cast<uint64_t>(i + 1), Request::probe({block}, {1, 2}, {{5}, {6}})))
        .then([=](const std::vector<uint8_t>& f) {
          auto r = decode_reply(f);
          if (r && r->kind == ReplyKind::submitted) submitted->insert(static_cast<int64_t>(r->id));
        });
  return {
      [=](event_atom, const std::vector<uint8_t>& f) {
        auto r = decode_reply(f);
        if (!r) return;
        if (!submitted->count(static_cast<int64_t>(r->id))) ++seen->early;
        if (r->kind == ReplyKind::finished && ++seen->finished == n) {
          self->send(report_to, seen->early);
          self->quit();
        }
      },
  };
}

TEST_F(ActorsFixture, MemoryActorAnswersComeBeforeTheirRequestsEvents) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  const BlockId b = new_block(self, "context");
  ASSERT_EQ(call(self, encode_request(0, Request::forward(b, {5, 6, 7, 8, 9}))).kind, ReplyKind::submitted);
  events_until_finished(self);
  for (int round = 0; round < 20; ++round) {
    sys->spawn(probing_client, batcher, b, 8, caf::actor_cast<caf::actor>(self));
    int early = -1;
    self->receive([&](int e) { early = e; }, caf::after(std::chrono::seconds(30)) >> [] {});
    ASSERT_EQ(early, 0) << "round " << round << ": events arrived before their Submitted";
  }
}

// After a scheduled program's generate finishes, its status (asked at once, by the requester)
// counts that step: nothing pending, its tokens cached.
TEST_F(ActorsFixture, MemoryActorStatusCountsTheStepTheRequesterSaw) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  const BlockId b = new_block(self, "thoughts");
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 3, {b}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  int64_t tokens = 0;
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(call(self, generate_into(b, 2)).kind, ReplyKind::submitted);
    events_until_finished(self);
    tokens += 3;  // the prefill token and two generated; the last is sampled, not yet cached
    const Reply st = program_status(self, 3);
    ASSERT_EQ(st.kind, ReplyKind::program_status) << st.text;
    EXPECT_EQ(st.pending, 0) << "request " << i;
    EXPECT_EQ(static_cast<int64_t>(st.tokens), tokens) << "request " << i;
  }
}

// The two actors are linked: when either ends, so does the other (a node does not go on with
// half of itself).
TEST(MemoryActor, ItAndItsBatcherEndTogether) {
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuDevice> device;
  ASSERT_NO_FATAL_FAILURE(test::load_model(test::goldens_dir() + "/tiny_llama_f32.gguf", &model, &device));
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  for (bool kill_memory : {false, true}) {
    auto e = Engine::create(*model, *device, {.n_pages = 64, .token_budget = 64});
    ASSERT_TRUE(e.ok());
    NodeActors node = spawn_node_actors(sys, std::shared_ptr<Engine>(std::move(*e)));
    const caf::actor other = kill_memory ? node.batcher : node.memory;
    self->monitor(other);
    caf::anon_send_exit(kill_memory ? node.memory : node.batcher, caf::exit_reason::kill);
    bool down = false;
    self->receive([&](caf::down_msg& m) { down = m.source == other.address(); },
                  caf::after(std::chrono::seconds(10)) >> [] {});
    EXPECT_TRUE(down) << (kill_memory ? "the batcher outlived its memory actor"
                                      : "the memory actor outlived its batcher");
  }
}

}  // namespace
}  // namespace chorus
