// One scheduler for every program of a node: HTTP programs (the gateway's) and topology programs
// (`chorus run`'s) on one engine, under one policy, each kind paused to make room for the other.
#include <gtest/gtest.h>
#include <httplib.h>

#include <caf/all.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/program.h"
#include "actors/program_manager.h"
#include "engine/forward/kv_cache.h"
#include "gateway/gateway.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"
#include "topology/topology.h"

namespace chorus {
namespace {

using json = nlohmann::json;

// Polls `cond` until it holds or 60 s pass.
template <class Cond>
bool eventually(Cond cond) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Text of exactly `n` tokens for the model.
std::string text_of(const Model& m, int n) {
  std::string s;
  while (static_cast<int>(m.tokenizer.encode(s + " stone").size()) <= n) s += " stone";
  return s;
}

// The default model on a shared engine of 48 KV pages.
class OneScheduler : public ::testing::Test {
 protected:
  void SetUp() override {
    CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
    (void)gguf;
    ASSERT_NO_FATAL_FAILURE(test::load_model(default_model_path(), &model_, &device_));
    cfg_.set("scheduler.max-threads", 2);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    EngineOptions eo;
    eo.n_pages = 48;
    auto e = SharedEngine::create(*sys_, *model_, *device_, eo);
    ASSERT_TRUE(e.ok()) << e.error().message;
    engine_ = std::move(*e);
  }
  void TearDown() override {
    engine_.reset();  // before the actor system
    sys_.reset();
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuDevice> device_;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::shared_ptr<SharedEngine> engine_;
};

// A pool of 48 pages (pauses above 45.6, restores under 40.8). The topology program (19 pages
// of notes, then idle: its source waits for input, so its pages weigh fully) is resident when
// an HTTP program's first request comes, needing 29 pages: the two do not fit together, nothing
// runs, so the policy lets the request in and pauses the topology program. Then input arrives
// for the topology program: its write waits for its restore, and the policy pauses the HTTP
// program, idle since its reply (its client "runs tools"), to bring it back. The HTTP program's
// second turn brings it back in turn, and finds its first turn in its block, exactly.
TEST_F(OneScheduler, PausesHttpAndTopologyProgramsForEachOther) {
  caf::actor_system& sys = *sys_;
  const Model* model = model_.get();
  ProgramPolicyOptions po;
  po.check_period_s = 0.05;
  po.decay_tau_s = 0.05;  // an idle HTTP program weighs little within a fraction of a second
  ProgramManager& scheduler = engine_->schedule(po);

  auto t = topology::load_string(
      "blocks:\n  notes: {text: \"" + text_of(*model, 300) +
          "\"}\nactors:\n  feed: {kind: source, from: api, writes: notes, view: [notes]}\n",
      "notes.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message;
  auto program = Program::start(sys, *t, engine_);
  ASSERT_TRUE(program.ok()) << program.error().message;
  const uint64_t topo = scheduler.programs().at(0).id;  // the only program yet
  auto seen = [&](uint64_t id) {
    for (const ScheduledProgram& p : scheduler.programs())
      if (p.id == id) return p;
    return ScheduledProgram{};
  };
  ASSERT_TRUE(eventually([&] { return seen(topo).admitted && seen(topo).pages == 19; }));
  const int64_t notes = seen(topo).tokens;  // its initial text, as the block holds it

  GatewayOptions go;
  go.port = 0;
  go.model_name = "m";
  go.restore_wait_s = 60;
  auto gw = Gateway::start(sys, engine_->batcher(), *model, go, &scheduler);
  ASSERT_TRUE(gw.ok()) << gw.error().message;
  httplib::Client http("127.0.0.1", (*gw)->port());
  http.set_read_timeout(120, 0);
  json messages = json::array({{{"role", "user"}, {"content", text_of(*model, 420)}}});
  auto chat = [&] {
    json body = {{"model", "m"},
                 {"messages", messages},
                 {"max_tokens", 16},
                 {"temperature", 0},
                 {"program_id", "agent"}};
    auto r = http.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r) << "no reply";
    if (!r) return json{};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  };

  // Turn 1: about 29 pages beside the topology program's 19.
  const json first = chat();
  ASSERT_TRUE(first.contains("usage")) << first.dump();
  const int64_t turn1 = first["usage"]["total_tokens"];
  EXPECT_GE(KvCache::pages_for(turn1), 28);
  EXPECT_EQ(seen(topo).pauses, 1) << "the topology program made way for the HTTP program";
  EXPECT_TRUE(seen(topo).paused);
  uint64_t agent = 0;
  for (const ScheduledProgram& p : scheduler.programs())
    if (p.id != topo) agent = p.id;
  ASSERT_NE(agent, 0u);

  // Input for the topology program: the HTTP program makes way for it.
  ASSERT_TRUE((*program)->feed("feed", " more stone\n").ok());  // one record (a line)
  ASSERT_TRUE(eventually([&] { return seen(topo).restores == 1 && !seen(topo).paused; }));
  EXPECT_GE(seen(agent).pauses, 1) << "the HTTP program made way for the topology program";

  // Turn 2 of the HTTP program: restored (the topology program paused again), its first turn
  // found in its block.
  messages.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
  messages.push_back({{"role", "user"}, {"content", "again"}});
  const json second = chat();
  ASSERT_TRUE(second.contains("usage")) << second.dump();
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], turn1);
  EXPECT_GE(seen(agent).restores, 1);
  EXPECT_EQ(seen(topo).pauses, 2);

  ASSERT_TRUE((*program)->close("feed").ok());
  const ProgramReport report = (*program)->wait();
  EXPECT_EQ(report.ended_by, "all roles done") << report.error;
  EXPECT_EQ(report.block_tokens.at("notes"),
            notes + static_cast<int64_t>(model->tokenizer.encode(" more stone\n").size()));
  (*gw)->stop();
  const ProgramManagerStats st = scheduler.stats();
  EXPECT_EQ(st.refused, 0);
}

// A request whose program the scheduler does not bring back in time (it checks only when told
// to, here) is taken back from the memory actor after --restore-wait: 503 `program_paused`, the
// program kept. Its next request runs once the scheduler admits the program.
TEST_F(OneScheduler, ARequestNotAdmittedInTimeIsA503AndTheProgramStays) {
  caf::actor_system& sys = *sys_;
  const Model* model = model_.get();
  SchedulerOptions so;
  so.policy.capacity_pages = 48;
  so.policy.check_period_s = 0;  // no check but those this test makes
  ProgramManager scheduler(sys, engine_->batcher(), so);
  GatewayOptions go;
  go.port = 0;
  go.model_name = "m";
  go.restore_wait_s = 0.3;
  auto gw = Gateway::start(sys, engine_->batcher(), *model, go, &scheduler);
  ASSERT_TRUE(gw.ok()) << gw.error().message;
  httplib::Client http("127.0.0.1", (*gw)->port());
  http.set_read_timeout(120, 0);
  const std::string body = json{
      {"model", "m"},
      {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
      {"max_tokens", 4},
      {"program_id", "late"}}.dump();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = http.Post("/v1/chat/completions", body, "application/json");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "program_paused") << r->body;
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 10.0);
  auto programs = http.Get("/programs");
  ASSERT_TRUE(programs);
  EXPECT_EQ(json::parse(programs->body)["data"].size(), 1u) << programs->body;  // it stays

  int status = 0;
  std::thread next([&] {
    httplib::Client c("127.0.0.1", (*gw)->port());
    c.set_read_timeout(120, 0);
    auto x = c.Post("/v1/chat/completions", body, "application/json");
    status = x ? x->status : -1;
  });
  ASSERT_TRUE(eventually([&] {
    scheduler.check();
    return scheduler.stats().admitted == 1;
  }));
  next.join();
  EXPECT_EQ(status, 200);
  (*gw)->stop();
}

}  // namespace
}  // namespace chorus
