// A batcher over a model, spawned in an actor system of its own, and how tests talk to it.
#pragma once

#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/atoms.h"
#include "actors/batcher.h"
#include "device/cpu_device.h"
#include "engine/step/engine.h"
#include "net/codec.h"
#include "tests/support/model_fixture.h"

namespace chorus {

struct ActorsFixture : ::testing::Test {
  void start(const std::string& model_path, int64_t pages = 512, int linear_slots = 0) {
    ASSERT_NO_FATAL_FAILURE(test::load_model(model_path, &model, &device));
    auto e =
        Engine::create(*model, *device, {.n_pages = pages, .token_budget = 64, .linear_slots = linear_slots});
    ASSERT_TRUE(e.ok());
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
    batcher = spawn_batcher(*sys, std::move(*e));
  }
  void TearDown() override {
    if (sys) {
      caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
      batcher = nullptr;
      sys.reset();
    }
  }
  Reply call(caf::scoped_actor& self, const Frame& f) {
    Reply out;
    self->request(batcher, std::chrono::seconds(30), frame_atom::value, f)
        .receive([&](const std::vector<uint8_t>& r) { out = *decode_reply(r); },
                 [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    return out;
  }
  // A program command (register, pause, restore, terminate) and its reply.
  Reply program_cmd(caf::scoped_actor& self, ProgramCmd::Op op, uint64_t id, std::vector<BlockId> blocks = {},
                    PauseMode mode = PauseMode::drop, bool hold = false) {
    ProgramCmd c;
    c.op = op;
    c.program = id;
    c.blocks = std::move(blocks);
    c.mode = mode;
    c.hold = hold;
    return call(self, encode_program(0, c));
  }
  BlockId new_block(caf::scoped_actor& self, const std::string& name) {
    return static_cast<BlockId>(call(self, encode_create_block(0, name)).id);
  }
  // Where a program stands (a ProgramPhase frame: it also records the phase, reasoning here).
  Reply program_status(caf::scoped_actor& self, uint64_t id) {
    return program_cmd(self, ProgramCmd::Op::phase, id);
  }
  // A greedy generate into `b` under the view [b], one prefill token, exactly `max_tokens`.
  static Frame generate_into(BlockId b, int max_tokens) {
    StopCondition stop;
    stop.max_tokens = max_tokens;
    stop.at_end_of_generation = false;
    return encode_request(0, Request::generate(b, {b}, {3}, SamplingParams::greedy(), stop));
  }
  std::vector<Reply> events_until_finished(caf::scoped_actor& self) {
    std::vector<Reply> out;
    for (bool done = false; !done;) {
      self->receive([&](event_atom, const std::vector<uint8_t>& f) {
        out.push_back(*decode_reply(f));
        done = out.back().kind == ReplyKind::finished;
      });
    }
    return out;
  }

  std::unique_ptr<Model> model;
  std::unique_ptr<CpuDevice> device;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor batcher;
};

}  // namespace chorus
