// The batcher actor and the thinker/writer roles over it.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "actors/atoms.h"
#include "actors/batcher.h"
#include "actors/feeders.h"
#include "actors/node_port.h"
#include "actors/program_roles.h"
#include "actors/submit.h"
#include "device/cpu_device.h"
#include "engine/step/engine.h"
#include "net/codec.h"
#include "net/role_codec.h"
#include "net/wire.h"
#include "tests/support/actors_fixture.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

// The text of a RoleText frame (a feeder's line), "" for any other frame.
std::string text_of(const Frame& f) {
  auto m = decode_role(f);
  return m && m->kind == RoleKind::text ? m->text : std::string();
}

TEST_F(ActorsFixture, BatcherCreatesBlocksRunsRequestsAndStreamsEventsInOrder) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  const Reply block = call(self, encode_create_block(1, "prompt"));
  ASSERT_EQ(block.kind, ReplyKind::block_info);
  const Reply sub =
      call(self, encode_request(2, Request::forward(static_cast<BlockId>(block.id), {5, 6, 7, 8})));
  ASSERT_EQ(sub.kind, ReplyKind::submitted);
  auto ev = events_until_finished(self);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].reason, FinishReason::completed);
  const Reply out = call(self, encode_create_block(3, "answer"));
  StopCondition stop;
  stop.max_tokens = 6;
  stop.at_end_of_generation = false;
  const Reply gen = call(self, encode_request(4, Request::generate(static_cast<BlockId>(out.id),
                                                                   {static_cast<BlockId>(block.id)}, {9},
                                                                   SamplingParams::greedy(), stop)));
  ASSERT_EQ(gen.kind, ReplyKind::submitted);
  ev = events_until_finished(self);
  int tokens = 0;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    EXPECT_EQ(ev[i].kind, ReplyKind::token);
    EXPECT_EQ(ev[i].id, gen.id);
    tokens += ev[i].token >= 0;
  }
  EXPECT_EQ(tokens, 6);
  EXPECT_EQ(ev.back().reason, FinishReason::max_tokens);
}

TEST_F(ActorsFixture, BatcherAnswersBadFramesWithErrorsAndKeepsServing) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf", 64);
  caf::scoped_actor self{*sys};
  Reply r = call(self, Frame{1, 2, 3});
  EXPECT_EQ(r.kind, ReplyKind::error);
  r = call(self, encode_hello_envelope(5, "node"));
  EXPECT_EQ(r.kind, ReplyKind::error);
  EXPECT_NE(r.text.find("not a command"), std::string::npos) << r.text;
  r = call(self, encode_request(6, Request::probe({42}, {1}, {{1}})));
  EXPECT_EQ(r.kind, ReplyKind::error);
  EXPECT_NE(r.text.find("block 42 does not exist"), std::string::npos) << r.text;
  EXPECT_EQ(r.code, Errc::not_found) << "the error's class travels in the reply";
  EXPECT_EQ(call(self, encode_create_block(7, "still serving")).kind, ReplyKind::block_info);
  // More KV than the pool holds (64 pages: 1024 positions): out_of_memory, through ask() too.
  const BlockId b = new_block(self, "long");
  StopCondition stop;
  stop.max_tokens = 800;
  r = call(self, encode_request(8, Request::generate(b, {b}, std::vector<TokenId>(500, 1),
                                                     SamplingParams::greedy(), stop)));
  EXPECT_EQ(r.kind, ReplyKind::error);
  EXPECT_EQ(r.code, Errc::out_of_memory) << r.text;
  auto asked = ask(self, batcher, encode_request(9, Request::forward(b, std::vector<TokenId>(2000, 1))));
  ASSERT_FALSE(asked.ok());
  EXPECT_EQ(asked.error().code, Errc::out_of_memory) << asked.error().message;
}

// Programs through the batcher: pause (drop or offload) frees their pages, loses no token, and
// restore brings back the same cache — offload exactly even for a Hogwild! program.
TEST_F(ActorsFixture, ProgramsPauseAndRestoreThroughTheBatcher) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  auto block = [&](const char* name) {
    return static_cast<BlockId>(call(self, encode_create_block(0, name)).id);
  };
  auto run = [&](const Request& r) {
    const Reply s = call(self, encode_request(0, r));
    EXPECT_EQ(s.kind, ReplyKind::submitted) << s.text;
    return events_until_finished(self);
  };
  auto probe = [&](std::vector<BlockId> view) {
    for (const Reply& e : run(Request::probe(std::move(view), {7, 8, 9}, {{1}, {2}, {3}})))
      if (e.kind == ReplyKind::probe_result) return e.probabilities;
    return std::vector<float>{};
  };
  auto program = [&](ProgramCmd::Op op, uint64_t id, std::vector<BlockId> blocks = {},
                     PauseMode mode = PauseMode::drop) {
    return program_cmd(self, op, id, std::move(blocks), mode);
  };
  StopCondition stop;
  stop.max_tokens = 12;
  stop.at_end_of_generation = false;
  // A program written block after block; dropped and rebuilt.
  const BlockId p = block("prompt"), t = block("thoughts");
  run(Request::forward(p, {5, 6, 7, 8, 9, 10, 11}));
  run(Request::generate(t, {p}, {3}, SamplingParams::greedy(), stop));
  ASSERT_EQ(program(ProgramCmd::Op::register_program, 1, {p, t}).kind, ReplyKind::program_status);
  const auto before = probe({p, t});
  Reply st = program(ProgramCmd::Op::pause, 1);
  ASSERT_EQ(st.kind, ReplyKind::program_status) << st.text;
  EXPECT_EQ(st.state, ProgramState::paused);
  EXPECT_EQ(st.pages, 0);
  EXPECT_EQ(call(self, encode_request(0, Request::probe({p}, {1}, {{1}}))).kind, ReplyKind::error)
      << "a paused block is refused";
  st = program(ProgramCmd::Op::restore, 1);
  ASSERT_EQ(st.kind, ReplyKind::program_status) << st.text;
  EXPECT_EQ(st.state, ProgramState::active);
  EXPECT_GT(st.pages, 0);
  const auto after = probe({p, t});
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_NEAR(after[i], before[i], 1e-4f * std::max(before[i], 1e-3f));
  // A Hogwild! program (two writers seeing each other live); offloaded and brought back exactly.
  const BlockId a = block("a"), b = block("b");
  ASSERT_EQ(
      call(self, encode_request(0, Request::generate(a, {p, a, b}, {3}, SamplingParams::greedy(), stop)))
          .kind,
      ReplyKind::submitted);
  ASSERT_EQ(
      call(self, encode_request(0, Request::generate(b, {p, b, a}, {4}, SamplingParams::greedy(), stop)))
          .kind,
      ReplyKind::submitted);
  for (int finished = 0; finished < 2;)
    self->receive([&](event_atom, const std::vector<uint8_t>& f) {
      finished += decode_reply(f)->kind == ReplyKind::finished;
    });
  ASSERT_EQ(program(ProgramCmd::Op::register_program, 2, {a, b}).kind, ReplyKind::program_status);
  const auto hog = probe({p, a, b});
  ASSERT_EQ(program(ProgramCmd::Op::pause, 2, {}, PauseMode::offload).state, ProgramState::paused);
  ASSERT_EQ(program(ProgramCmd::Op::restore, 2).state, ProgramState::active);
  EXPECT_EQ(probe({p, a, b}), hog);
  // Terminating frees the program's blocks; unknown programs are errors.
  EXPECT_EQ(program(ProgramCmd::Op::terminate, 2).state, ProgramState::terminated);
  EXPECT_EQ(call(self, encode_request(0, Request::probe({a}, {1}, {{1}}))).kind, ReplyKind::error);
  EXPECT_EQ(program(ProgramCmd::Op::pause, 99).kind, ReplyKind::error);
}

// A program registered with `hold`: a request naming its blocks while it is paused waits in the
// batcher (no reply yet) and goes in when the program is restored; one still waiting when the
// program is terminated gets an error. Its actors need not know it was paused.
TEST_F(ActorsFixture, HeldRequestsWaitForTheirProgramsRestore) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  auto block = [&](const char* name) {
    return static_cast<BlockId>(call(self, encode_create_block(0, name)).id);
  };
  auto program = [&](ProgramCmd::Op op, uint64_t id, std::vector<BlockId> blocks = {}, bool hold = false) {
    return program_cmd(self, op, id, std::move(blocks), PauseMode::drop, hold);
  };
  const BlockId p = block("prompt"), t = block("thoughts");
  ASSERT_EQ(call(self, encode_request(0, Request::forward(p, {5, 6, 7, 8, 9}))).kind, ReplyKind::submitted);
  events_until_finished(self);
  ASSERT_EQ(program(ProgramCmd::Op::register_program, 5, {p, t}, true).kind, ReplyKind::program_status);
  ASSERT_EQ(program(ProgramCmd::Op::pause, 5).state, ProgramState::paused);
  // From another actor (a role of the program, say): the generate waits.
  StopCondition stop;
  stop.max_tokens = 12;
  stop.at_end_of_generation = false;
  std::atomic<bool> replied{false};
  ReplyKind kind = ReplyKind::other;
  int tokens = 0;
  std::thread role([&] {
    caf::scoped_actor other{*sys};
    kind = call(other, encode_request(7, Request::generate(t, {p, t}, {3}, SamplingParams::greedy(), stop)))
               .kind;
    replied = true;
    if (kind != ReplyKind::submitted) return;
    for (const Reply& e : events_until_finished(other)) tokens += e.kind == ReplyKind::token && e.token >= 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(replied) << "the request was answered while its program was paused";
  // Where it stands (ProgramPhase: the phase is recorded, the status comes back): paused, one
  // request held, nothing of it in the engine.
  ProgramCmd phase;
  phase.op = ProgramCmd::Op::phase;
  phase.program = 5;
  phase.acting = true;
  Reply where = call(self, encode_program(0, phase));
  EXPECT_EQ(where.kind, ReplyKind::program_status) << where.text;
  EXPECT_EQ(where.state, ProgramState::paused);
  EXPECT_TRUE(where.acting);
  EXPECT_EQ(where.held, 1);
  EXPECT_EQ(where.pending, 0);
  const Reply st = program(ProgramCmd::Op::restore, 5);
  EXPECT_EQ(st.kind, ReplyKind::program_status) << st.text;
  role.join();
  EXPECT_EQ(kind, ReplyKind::submitted);
  EXPECT_EQ(tokens, 12);
  phase.acting = false;
  where = call(self, encode_program(0, phase));
  EXPECT_EQ(where.state, ProgramState::active);
  EXPECT_FALSE(where.acting);
  EXPECT_EQ(where.held, 0);
  EXPECT_EQ(where.pending, 0);  // the generate finished
  EXPECT_GT(where.pages, 0);
  // A long generate running: the program's blocks are held (it could not be paused now).
  StopCondition longer = stop;
  longer.max_tokens = 2000;
  ASSERT_EQ(
      call(self, encode_request(0, Request::generate(t, {p, t}, {3}, SamplingParams::greedy(), longer))).kind,
      ReplyKind::submitted);
  where = call(self, encode_program(0, phase));
  EXPECT_GE(where.pending, 1);
  events_until_finished(self);
  // Paused again; a probe waits, and the program ends under it: an error, naming the program.
  ASSERT_EQ(program(ProgramCmd::Op::pause, 5).state, ProgramState::paused);
  std::string refused;
  std::thread late([&] {
    caf::scoped_actor other{*sys};
    const Reply r = call(other, encode_request(8, Request::probe({p, t}, {1}, {{1}})));
    refused = std::string(reply_kind_name(r.kind)) + ": " + r.text;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(program(ProgramCmd::Op::terminate, 5).state, ProgramState::terminated);
  late.join();
  EXPECT_EQ(refused, "Error: program 5 was terminated while this request waited for its restore");
  // Without `hold`, a paused program's blocks refuse at once (ProgramsPauseAndRestoreThroughTheBatcher).
}

// The file tail follows a file while it grows: each line once, whole, in order — the lines
// written before it started and those appended after.
TEST(ActorsFeeders, FileTailFollowsAGrowingFile) {
  const std::string path = ::testing::TempDir() + "chorus_tail_test.log";
  std::remove(path.c_str());
  auto append = [&](int i) {
    std::FILE* f = std::fopen(path.c_str(), "ab");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "line %d: disk usage at %d%%\n", i, 50 + 8 * i);
    std::fclose(f);
  };
  append(0);
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor tail = spawn_file_tail(sys, path, caf::actor_cast<caf::actor>(self));
  std::vector<std::string> lines;
  for (int i = 1; i < 6; ++i) {  // the file grows while the tail runs; a line written in two parts
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    if (i == 3) {
      std::FILE* f = std::fopen(path.c_str(), "ab");
      std::fputs("line 3: disk ", f);
      std::fclose(f);
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      f = std::fopen(path.c_str(), "ab");
      std::fputs("usage at 74%\n", f);
      std::fclose(f);
    } else {
      append(i);
    }
  }
  while (lines.size() < 6)
    self->receive([&](role_atom, const Frame& f) { lines.push_back(text_of(f)); },
                  caf::after(std::chrono::seconds(10)) >>
                      [&] {
                        ADD_FAILURE() << "no line within 10 s";
                        lines.resize(6);
                      });
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(lines[static_cast<size_t>(i)],
              "line " + std::to_string(i) + ": disk usage at " + std::to_string(50 + 8 * i) + "%\n");
  self->send(tail, stop_atom::value);
  self->wait_for(tail);
  std::remove(path.c_str());
}

// The ZeroMQ sink publishes what it is given; the ZeroMQ source subscribed to it hands the text on.
TEST(ActorsRoles, ZeroMqPubSinkFeedsSubSource) {
  zmq::context_t zctx(1);
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  {
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    caf::actor pub;
    auto bound = spawn_zmq_pub_sink(sys, zctx, "tcp://127.0.0.1:*", "logs", &pub);
    ASSERT_TRUE(bound.ok()) << bound.error().to_string();
    auto sub = spawn_zmq_sub_source(sys, zctx, *bound, "logs", caf::actor_cast<caf::actor>(self));
    ASSERT_TRUE(sub.ok());
    std::vector<std::string> got;
    // PUB/SUB drops messages until the subscription is in place: send until one arrives.
    for (int i = 0; i < 200 && got.empty(); ++i) {
      self->send(pub, role_atom::value, encode_role_text("hello " + std::to_string(i)));
      self->receive([&](role_atom, const Frame& f) { got.push_back(text_of(f)); },
                    caf::after(std::chrono::milliseconds(20)) >> [] {});
    }
    ASSERT_FALSE(got.empty()) << "nothing came through PUB -> SUB";
    EXPECT_EQ(got[0].rfind("hello ", 0), 0u);
    self->send(pub, stop_atom::value);
    self->send(*sub, stop_atom::value);
    self->wait_for(pub, *sub);
  }
}

// 8 writers append to one block through the batcher, 10^5 appends of random sizes in total: the
// log is exactly the concatenation of whole appends in the order they were granted (request id
// order), nothing lost, nothing interleaved.
TEST(ActorsStress, EightWritersOneBlockHundredThousandAppends) {
  auto m = Model::load(test::goldens_dir() + "/tiny_llama_f32.gguf");
  ASSERT_TRUE(m.ok());
  auto d = CpuDevice::create();
  ASSERT_TRUE(d.ok());
  auto e = Engine::create(**m, **d, {.n_pages = 64, .token_budget = 64, .max_view_tokens = 1 << 20});
  ASSERT_TRUE(e.ok());
  std::shared_ptr<Engine> engine = std::move(*e);
  const BlockId log = engine->blocks().create("log");
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  {
    caf::actor_system sys{cfg};
    caf::actor batcher = spawn_batcher(sys, engine);
    constexpr int kWriters = 8, kAppends = 100000 / kWriters;
    std::mutex mu;
    std::vector<std::pair<int64_t, std::vector<TokenId>>> granted;  // (request id, tokens)
    const auto t0 = std::chrono::steady_clock::now();
    {
      caf::scoped_actor self{sys};
      const caf::actor me = caf::actor_cast<caf::actor>(self);
      for (int w = 0; w < kWriters; ++w) {
        sys.spawn([=, &mu, &granted](caf::event_based_actor* a) -> caf::behavior {
          // Each writer waits for one append's acknowledgement before sending the next.
          auto rng = std::make_shared<std::mt19937>(static_cast<uint32_t>(w));
          auto sent = std::make_shared<int>(0), acked = std::make_shared<int>(0);
          auto next = std::make_shared<std::function<void()>>();
          *next = [=, &mu, &granted] {
            if (*sent == kAppends) {
              if (*acked == kAppends) {
                a->send(me, stop_atom::value);
                a->quit();
              }
              return;
            }
            ++*sent;
            std::vector<TokenId> toks(1 + (*rng)() % 4);
            toks[0] = 200 + w;  // marks the writer
            for (size_t i = 1; i < toks.size(); ++i) toks[i] = static_cast<TokenId>((*rng)() % 190);
            a->request(batcher, caf::infinite, frame_atom::value,
                       encode_request(0, Request::append(log, toks)))
                .then([=, &mu, &granted](const std::vector<uint8_t>& reply) {
                  auto r = decode_reply(reply);
                  if (!r.ok() || r->kind != ReplyKind::submitted) {
                    ADD_FAILURE() << (r ? r->text : r.error().message);
                    return;
                  }
                  {
                    std::lock_guard<std::mutex> l(mu);
                    granted.emplace_back(r->id, toks);
                  }
                  ++*acked;
                  (*next)();
                });
          };
          (*next)();
          return {[](event_atom, const std::vector<uint8_t>&) {}};  // each append's RequestFinished
        });
      }
      for (int w = 0; w < kWriters; ++w)
        self->receive([](stop_atom) {},
                      caf::after(std::chrono::seconds(120)) >> [] { FAIL() << "a writer timed out"; });
      // A graceful stop: the batcher applies everything it acknowledged, then ends.
      self->send(batcher, stop_atom::value);
      self->wait_for(batcher);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::sort(granted.begin(), granted.end());
    std::vector<TokenId> expected;
    for (const auto& [id, toks] : granted) expected.insert(expected.end(), toks.begin(), toks.end());
    ASSERT_EQ(granted.size(), static_cast<size_t>(kWriters * kAppends));
    const auto& got = (*engine->blocks().get(log))->tokens;
    std::printf("  %zu appends (%zu tokens) from %d writers in %.2f s\n", granted.size(), expected.size(),
                kWriters, secs);
    EXPECT_EQ(got.size(), expected.size());
    EXPECT_TRUE(got == expected) << "the log is not the concatenation of the appends in grant order";
  }
}

// Deterministic: CAF's test coordinator runs every actor on this thread, one message at a time,
// so the order of messages between thinker, writer and a scripted batcher is fixed and checked.
// The fake batcher answers each Generate with Submitted and then streams a scripted set of token
// events; the thinker's script holds two paragraphs.
TEST(ActorsDeterministic, ThinkerAnnouncesParagraphsAndWriterWritesOnePiecePerParagraph) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());

  const BlockId kThinking = 1, kWriting = 2;
  std::vector<std::string> log;  // what the fake batcher saw and what the sink got, in order
  auto fake_batcher = sys.spawn([&log, kThinking](caf::event_based_actor* self) -> caf::behavior {
    auto next_request = std::make_shared<RequestId>(100);
    auto pieces = std::make_shared<int>(0);
    return {
        [=, &log](frame_atom, const std::vector<uint8_t>& frame) -> std::vector<uint8_t> {
          uint64_t rid = 0;
          auto cmd = decode_command(frame, &rid);
          if (!cmd || !std::holds_alternative<Request>(*cmd))
            return encode_error_envelope(rid, make_error(Errc::invalid_argument, "not a request"));
          const Request& r = std::get<Request>(*cmd);
          const RequestId id = (*next_request)++;
          auto requester = caf::actor_cast<caf::actor>(self->current_sender());
          auto token = [&](const std::string& text) {
            Event e;
            e.type = Event::Type::token;
            e.request = id;
            e.block = r.write_to;
            e.token = 7;
            self->send(requester, event_atom::value, encode_event(0, e, text));
          };
          if (r.write_to == kThinking) {
            log.push_back("batcher: thinker generate");
            for (const char* t : {"First", " idea.", "\n\n", "Second", " idea.", "\n\n", "tail"}) token(t);
          } else {
            log.push_back("batcher: writer generate");
            token("piece " + std::to_string(++*pieces));
          }
          Event fin;
          fin.type = Event::Type::finished;
          fin.request = id;
          fin.block = r.write_to;
          self->send(requester, event_atom::value, encode_event(0, fin, ""));
          return encode_submitted(rid, id);
        },
    };
  });
  // The topology roles (actors/program_roles.h) with a controller that routes the thinker's
  // `paragraph` events to the writer, as Program::start wires them.
  using namespace program_roles;
  bool writer_done = false;
  SinkRoleConfig out;
  out.name = "out";
  out.kind = topology::SinkKind::callback;
  out.callback = [&log](const std::string&, const std::string& s) { log.push_back("sink: " + s); };
  caf::actor sink = program_roles::spawn_sink(sys, out);
  GeneratorConfig wc;
  wc.name = "writer";
  wc.prefill.fixed = {1};
  wc.triggers.on = {"paragraph"};
  wc.triggers.upstream = {"thinker"};
  wc.request = Request::generate(kWriting, {kThinking, kWriting}, {}, SamplingParams::greedy(), {});
  wc.sinks = {sink};
  caf::actor writer = spawn_generator(sys, fake_batcher, wc);
  GeneratorConfig tc;
  tc.name = "thinker";
  tc.prefill.fixed = {1};
  tc.stream = true;
  tc.request = Request::generate(kThinking, {kThinking}, {}, SamplingParams::greedy(), {});
  tc.emits = {{"\n\n", "paragraph"}};
  caf::actor thinker = spawn_generator(sys, fake_batcher, tc);
  ControllerConfig cc;
  cc.subscribers = {{"paragraph", {writer}}, {"thinker.done", {writer}}};
  cc.pending = {"thinker", "writer"};
  cc.outcome = std::make_shared<Outcome>();
  cc.hook = [&](const ProgramEvent& e) {
    if (e.name == "writer.done") {
      log.push_back("writer done");
      writer_done = true;
    }
  };
  caf::actor ctl = spawn_controller(sys, cc);
  caf::anon_send(writer, start_atom::value, ctl, encode_start_role());
  caf::anon_send(thinker, start_atom::value, ctl, encode_start_role());
  sched.run();
  EXPECT_TRUE(writer_done);
  // Three pieces: two paragraphs ended by the separator, and the unterminated tail at the end.
  // The writer runs one request at a time, and writes each piece before it starts the next.
  const std::vector<std::string> expected = {
      "batcher: thinker generate", "batcher: writer generate", "sink: piece 1\n", "batcher: writer generate",
      "sink: piece 2\n",           "batcher: writer generate", "sink: piece 3\n"};
  // The writer's done event goes to the controller, its last piece to the sink: two actors, so
  // the done may come before the sink has written the piece — but after the writer's last run.
  std::vector<std::string> pieces = log;
  const auto done_at = std::find(pieces.begin(), pieces.end(), "writer done");
  ASSERT_NE(done_at, pieces.end());
  EXPECT_GT(done_at - pieces.begin(), 5) << "done before the writer's third run";
  pieces.erase(done_at);
  EXPECT_EQ(pieces, expected);
  EXPECT_EQ(cc.outcome->report.ended_by, "all roles done");
  for (const caf::actor& x : {fake_batcher, writer, thinker, ctl, sink})
    caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
  sched.run();
}

// The cooperative batcher over the tiny random-weight model, on CAF's test coordinator: every
// actor runs on this thread, one message at a time, when the test calls sched->run().
struct DeterministicBatcher : ::testing::Test {
  void start(int token_budget) {
    ASSERT_NO_FATAL_FAILURE(test::load_model(test::goldens_dir() + "/tiny_llama_f32.gguf", &model, &device));
    auto e = Engine::create(*model, *device, {.n_pages = 256, .token_budget = token_budget});
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    engine = std::move(*e);
    cfg.set("scheduler.policy", caf::atom("testing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    batcher = spawn_batcher_cooperative(*sys, engine);
  }
  void TearDown() override {
    if (!sys) return;
    caf::anon_send(batcher, stop_atom::value);
    sched->run();
    batcher = nullptr;
    sys.reset();
  }

  std::unique_ptr<Model> model;
  std::unique_ptr<CpuDevice> device;
  std::shared_ptr<Engine> engine;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  caf::actor batcher;
};

// The real batcher logic, deterministically: the cooperative batcher on CAF's test coordinator,
// with the tiny random-weight model. Two clients write one block (chunked: writes longer than
// the step's token budget), then one generates over it.
TEST_F(DeterministicBatcher, OrderIsCreateWritesInGrantOrderThenGenerateThenFinished) {
  start(7);

  std::vector<std::string> log;  // "<client>: <reply kind>[ <request>]" in arrival order
  auto describe = [](const std::vector<uint8_t>& f) {
    auto r = decode_reply(f);
    if (!r) return std::string("undecodable");
    if (r->kind == ReplyKind::error) return "Error " + r->text;
    if (r->kind == ReplyKind::block_info) return std::string("BlockInfo");
    return reply_kind_name(r->kind) + std::string(" ") + std::to_string(r->id);
  };
  // A client sends each (frame_atom, frame) it is given to the batcher and logs what comes back.
  auto client = [&](const std::string& name) {
    return sys->spawn([&, name](caf::event_based_actor* self) -> caf::behavior {
      return {
          [=, this, &log](frame_atom, const std::vector<uint8_t>& frame) {
            self->request(batcher, caf::infinite, frame_atom::value, frame)
                .then([=, &log](const std::vector<uint8_t>& reply) {
                  log.push_back(name + ": " + describe(reply));
                });
          },
          [=, &log](event_atom, const std::vector<uint8_t>& frame) {
            auto r = decode_reply(frame);
            if (r && r->kind == ReplyKind::finished) log.push_back(name + ": " + describe(frame));
            if (r && r->kind == ReplyKind::token) log.push_back(name + ": TokenEvent");
          },
      };
    });
  };
  caf::actor a = client("a"), b = client("b");
  caf::anon_send(a, frame_atom::value, encode_create_block(1, "log"));
  sched->run();
  ASSERT_EQ(log, std::vector<std::string>{"a: BlockInfo"});
  const BlockId blk = 0;
  ASSERT_TRUE(engine->blocks().is_live(blk));

  auto tokens = [](int first, int n) {
    std::vector<TokenId> t;
    for (int i = 0; i < n; ++i) t.push_back(first + i);
    return t;
  };
  // Three writes queued before any step runs, from two clients: 11, 9 and 13 tokens with a
  // budget of 7 per step, so a writer that did not hold the block to the end would interleave.
  caf::anon_send(a, frame_atom::value, encode_request(2, Request::forward(blk, tokens(10, 11), {blk})));
  caf::anon_send(b, frame_atom::value, encode_request(3, Request::forward(blk, tokens(30, 9), {blk})));
  caf::anon_send(a, frame_atom::value, encode_request(4, Request::forward(blk, tokens(50, 13), {blk})));
  StopCondition stop;
  stop.max_tokens = 3;
  caf::anon_send(b, frame_atom::value, encode_request(5, Request::generate(blk, {blk}, {70}, {}, stop)));
  sched->run();

  // The coordinator runs a (both its frames go to the batcher), then b (both of its), then the
  // batcher: it accepts a's 11, a's 13, b's 9 and b's generate (its request ids 1-4) before the
  // step it queued after the first. Each write holds the block to its end (2, 2 and 2 steps of
  // at most 7 tokens), in grant order, and the generate's tokens come last. Each client sees its
  // replies and events in the order they were sent.
  const std::vector<std::string> expected_log = {
      "a: BlockInfo",         "a: Submitted 1", "a: Submitted 2", "a: RequestFinished 1",
      "a: RequestFinished 2", "b: Submitted 3", "b: Submitted 4", "b: RequestFinished 3",
      "b: TokenEvent",        "b: TokenEvent",  "b: TokenEvent",  "b: RequestFinished 4"};
  EXPECT_EQ(log, expected_log);

  // The block's log is the concatenation of whole writes in grant order, then the generate's
  // prefill and its 3 tokens.
  std::vector<TokenId> expected;
  for (const auto& w : {tokens(10, 11), tokens(50, 13), tokens(30, 9)})
    expected.insert(expected.end(), w.begin(), w.end());
  expected.push_back(70);
  auto got = engine->blocks().get(blk);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ((*got)->tokens.size(), expected.size() + 3);
  EXPECT_EQ(std::vector<TokenId>((*got)->tokens.begin(), (*got)->tokens.begin() + expected.size()), expected);
  EXPECT_EQ((*got)->n_cached(), static_cast<int64_t>((*got)->tokens.size()));

  for (const caf::actor& x : {a, b}) caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
  sched->run();
}

// Block operations through the batcher: merge and fork answer with the new block, clear empties
// one, and each bad operation gets an Error naming the block.
TEST_F(DeterministicBatcher, MergesForksClearsAndFreesBlocks) {
  start(64);

  std::vector<Reply> replies;
  auto client = sys->spawn([&](caf::event_based_actor* self) -> caf::behavior {
    return {[=, this, &replies](frame_atom, const std::vector<uint8_t>& frame) {
              self->request(batcher, caf::infinite, frame_atom::value, frame)
                  .then([=, &replies](const std::vector<uint8_t>& r) {
                    auto rep = decode_reply(r);
                    Reply bad;  // kind other: undecodable
                    replies.push_back(rep ? *rep : bad);
                  });
            },
            [](event_atom, const std::vector<uint8_t>&) {}};
  });
  auto call = [&](const Frame& f) {
    replies.clear();
    caf::anon_send(client, frame_atom::value, f);
    sched->run();
    EXPECT_EQ(replies.size(), 1u);
    Reply none;  // kind other: no reply
    return replies.empty() ? none : replies[0];
  };
  const BlockId a = call(encode_create_block(1, "a")).id, b = call(encode_create_block(2, "b")).id;
  std::vector<TokenId> ta = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, tb = {20, 21, 22, 23, 24};
  EXPECT_EQ(call(encode_request(3, Request::forward(a, ta, {a}))).kind, ReplyKind::submitted);
  EXPECT_EQ(call(encode_request(4, Request::forward(b, tb, {b}))).kind, ReplyKind::submitted);

  const Reply merged = call(encode_merge_blocks(5, a, b, "ab"));
  ASSERT_EQ(merged.kind, ReplyKind::block_info) << merged.text;
  auto mb = engine->blocks().get(merged.id);
  ASSERT_TRUE(mb.ok());
  std::vector<TokenId> tab = ta;
  tab.insert(tab.end(), tb.begin(), tb.end());
  EXPECT_EQ((*mb)->tokens, tab);
  EXPECT_EQ((*mb)->n_cached(), 15);
  EXPECT_EQ((*mb)->name, "ab");

  const Reply forked = call(encode_fork_block(6, merged.id, 12, "head"));
  ASSERT_EQ(forked.kind, ReplyKind::block_info) << forked.text;
  EXPECT_EQ((*engine->blocks().get(forked.id))->tokens, std::vector<TokenId>(tab.begin(), tab.begin() + 12));

  const Reply cleared = call(encode_clear_block(7, a));
  ASSERT_EQ(cleared.kind, ReplyKind::block_info) << cleared.text;
  EXPECT_EQ(cleared.id, a);
  EXPECT_TRUE((*engine->blocks().get(a))->tokens.empty());
  EXPECT_EQ((*engine->blocks().get(merged.id))->tokens, tab) << "the merged block keeps its shared pages";

  // A view snapshot: each block, in the view's order, as it is now.
  const auto ab = static_cast<BlockId>(merged.id), head = static_cast<BlockId>(forked.id);
  const Reply snap = call(encode_snapshot_view(17, {ab, a, head}));
  ASSERT_EQ(snap.kind, ReplyKind::view_snapshot) << snap.text;
  EXPECT_EQ(snap.blocks,
            (std::vector<BlockSummary>{{ab, "ab", 15, 15}, {a, "a", 0, 0}, {head, "head", 12, 12}}));
  const Reply bad_snap = call(encode_snapshot_view(18, {a, 777}));
  EXPECT_EQ(bad_snap.kind, ReplyKind::error);
  EXPECT_NE(bad_snap.text.find("777"), std::string::npos) << bad_snap.text;

  EXPECT_EQ(call(encode_free_block(8, b)).kind, ReplyKind::block_info);
  const Reply bad_merge = call(encode_merge_blocks(9, a, b, "gone"));
  EXPECT_EQ(bad_merge.kind, ReplyKind::error);
  EXPECT_NE(bad_merge.text.find(std::to_string(b)), std::string::npos) << bad_merge.text;
  const Reply bad_fork = call(encode_fork_block(10, merged.id, 99, ""));
  EXPECT_EQ(bad_fork.kind, ReplyKind::error);
  EXPECT_NE(bad_fork.text.find("99 tokens"), std::string::npos) << bad_fork.text;
  const Reply bad_clear = call(encode_clear_block(11, 4242));
  EXPECT_EQ(bad_clear.kind, ReplyKind::error);
  EXPECT_NE(bad_clear.text.find("4242"), std::string::npos) << bad_clear.text;

  // A paused block takes no block operation until its program is restored. (Blocks that share
  // pages, like the merged and forked ones, cannot be paused: a block of its own is.)
  const BlockId c = call(encode_create_block(15, "c")).id;
  EXPECT_EQ(call(encode_request(16, Request::forward(c, tb, {c}))).kind, ReplyKind::submitted);
  ProgramCmd reg;
  reg.program = 7;
  reg.blocks = {c};
  ASSERT_EQ(call(encode_program(12, reg)).kind, ReplyKind::program_status);
  ProgramCmd pause = reg;
  pause.op = ProgramCmd::Op::pause;
  ASSERT_EQ(call(encode_program(13, pause)).kind, ReplyKind::program_status);
  const Reply paused_fork = call(encode_fork_block(14, c, 1, ""));
  EXPECT_EQ(paused_fork.kind, ReplyKind::error);
  EXPECT_NE(paused_fork.text.find("paused"), std::string::npos) << paused_fork.text;

  // A block created for a program joins it: paused and restored with it. Not into a paused
  // program, nor an unknown one.
  const Reply into_paused = call(encode_create_block(19, "d", 7));
  EXPECT_EQ(into_paused.kind, ReplyKind::error);
  EXPECT_NE(into_paused.text.find("program 7 is paused"), std::string::npos) << into_paused.text;
  const Reply into_unknown = call(encode_create_block(20, "d", 99));
  EXPECT_EQ(into_unknown.kind, ReplyKind::error);
  EXPECT_NE(into_unknown.text.find("program 99 is not registered"), std::string::npos) << into_unknown.text;
  ProgramCmd restore = reg;
  restore.op = ProgramCmd::Op::restore;
  ASSERT_EQ(call(encode_program(21, restore)).kind, ReplyKind::program_status);
  const auto d = static_cast<BlockId>(call(encode_create_block(22, "d", 7)).id);
  EXPECT_EQ(call(encode_request(23, Request::forward(d, ta, {c, d}))).kind, ReplyKind::submitted);
  const Reply status = call(encode_program(24, pause));
  ASSERT_EQ(status.kind, ReplyKind::program_status) << status.text;
  EXPECT_EQ(status.pages, 0) << "both blocks' pages are released";
  EXPECT_TRUE((*engine->blocks().get(d))->paused);
  EXPECT_EQ((*engine->blocks().get(d))->tokens, ta) << "pausing keeps every token";

  // A freed block leaves its program: the program pauses without it.
  ASSERT_EQ(call(encode_program(25, restore)).kind, ReplyKind::program_status);
  EXPECT_EQ(call(encode_free_block(26, d)).kind, ReplyKind::block_info);
  const Reply without_d = call(encode_program(27, pause));
  EXPECT_EQ(without_d.kind, ReplyKind::program_status) << without_d.text;

  // A fork made for a program joins it too (the gateway's n choices): not into a paused or an
  // unknown program; into an active one it is one of the program's blocks, which the program
  // then holds and which leaves it when freed.
  const Reply fork_paused = call(encode_fork_block(28, ab, 4, "", 7));
  EXPECT_EQ(fork_paused.kind, ReplyKind::error);
  EXPECT_NE(fork_paused.text.find("program 7 is paused"), std::string::npos) << fork_paused.text;
  const Reply fork_unknown = call(encode_fork_block(29, ab, 4, "", 99));
  EXPECT_NE(fork_unknown.text.find("program 99 is not registered"), std::string::npos) << fork_unknown.text;
  ASSERT_EQ(call(encode_program(30, restore)).kind, ReplyKind::program_status);
  const Reply joined = call(encode_fork_block(31, ab, 4, "choice", 7));
  ASSERT_EQ(joined.kind, ReplyKind::block_info) << joined.text;
  ProgramCmd status_of = reg;
  status_of.op = ProgramCmd::Op::phase;
  const Reply with_fork = call(encode_program(32, status_of));
  ASSERT_EQ(with_fork.kind, ReplyKind::program_status) << with_fork.text;
  EXPECT_EQ(with_fork.tokens, 5 + 4) << "c's tokens and the fork's";
  EXPECT_EQ(call(encode_free_block(33, static_cast<BlockId>(joined.id))).kind, ReplyKind::block_info);
  EXPECT_EQ(call(encode_program(34, status_of)).tokens, 5) << "the freed fork left the program";

  caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  sched->run();
}

// A probe on a timer, deterministically: the test coordinator holds delayed messages until the
// test fires them, so each tick is one question; a scripted batcher answers 0.9 and 0.2 in turn,
// and only answers at or above the threshold fire.
TEST(ActorsDeterministic, ProbeAsksOnEachTimerTickAndFiresAtTheThreshold) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  int questions = 0;
  auto fake_batcher = sys.spawn([&questions](caf::event_based_actor* self) -> caf::behavior {
    return {
        [=, &questions](frame_atom, const std::vector<uint8_t>& frame) -> caf::result<std::vector<uint8_t>> {
          uint64_t rid = 0;
          auto cmd = decode_command(frame, &rid);
          EXPECT_TRUE(cmd.ok() && std::get<Request>(*cmd).kind == RequestKind::probe);
          const RequestId id = ++questions;
          Event answer, fin;
          answer.type = Event::Type::probe_result;
          answer.request = fin.request = id;
          answer.probabilities = {questions % 2 == 1 ? 0.9f : 0.2f, 0.1f};
          fin.type = Event::Type::finished;
          auto to = caf::actor_cast<caf::actor>(self->current_sender());
          // As the batcher does: the Submitted reply first (the probe knows its request by it), then
          // the events.
          auto rp = self->make_response_promise<std::vector<uint8_t>>();
          rp.deliver(encode_submitted(rid, id));
          self->send(to, event_atom::value, encode_event(0, answer, ""));
          self->send(to, event_atom::value, encode_event(0, fin, ""));
          return rp;
        }};
  });
  // The topology probe (actors/program_roles.h): each firing is an event to its controller.
  using namespace program_roles;
  std::vector<std::string> fired;
  ControllerConfig cc;
  cc.pending = {"never"};  // nothing ends this program
  cc.outcome = std::make_shared<Outcome>();
  cc.hook = [&fired](const ProgramEvent& e) {
    if (e.name == "p.fired") fired.push_back(e.text);
  };
  caf::actor ctl = spawn_controller(sys, cc);
  ProbeRoleConfig pc;
  pc.name = "p";
  pc.request = Request::probe({0}, {5}, {{1}, {2}});
  pc.question.fixed = {5};
  pc.fire_on = {0};
  pc.threshold = 0.5f;
  pc.edge = false;  // every answer at or above the threshold fires
  pc.fires = "p.fired";
  pc.every_ms = 1000;
  caf::actor probe = program_roles::spawn_probe(sys, fake_batcher, pc);
  caf::anon_send(probe, start_atom::value, ctl, encode_start_role());
  sched.run();
  EXPECT_EQ(questions, 0) << "nothing asks before the first tick";
  for (int tick = 1; tick <= 4; ++tick) {
    ASSERT_TRUE(sched.trigger_timeout()) << "tick " << tick << " is armed";
    sched.run();
    EXPECT_EQ(questions, tick);
  }
  ASSERT_EQ(fired.size(), 2u) << "ticks 1 and 3 answered 0.9, ticks 2 and 4 0.2";
  for (const std::string& p : fired) EXPECT_EQ(std::stof(p), 0.9f) << p;
  for (const caf::actor& x : {fake_batcher, probe, ctl})
    caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
  sched.run();
}

// Lines from a pipe (as from stdin): each complete line as it arrives, the last partial line at
// end of input, then done.
TEST(ActorsRoles, FdLinesReadsAPipeLineByLineUntilItCloses) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto me = caf::actor_cast<caf::actor>(self);
  caf::actor reader = spawn_fd_lines(sys, fds[0], me, me);
  auto next_text = [&] {
    std::string got = "(nothing)";
    self->receive([&](role_atom, const Frame& f) { got = text_of(f); },
                  caf::after(std::chrono::seconds(30)) >> [] { ADD_FAILURE() << "no line within 30 s"; });
    return got;
  };
  auto put = [&](const std::string& s) {
    ASSERT_EQ(::write(fds[1], s.data(), s.size()), static_cast<ssize_t>(s.size()));
  };
  put("first\nsecond\nthi");
  EXPECT_EQ(next_text(), "first\n");
  EXPECT_EQ(next_text(), "second\n");
  put("rd");
  ::close(fds[1]);
  EXPECT_EQ(next_text(), "third");
  bool done = false;
  self->receive([&](role_atom, const Frame& f) { done = decode_role(f)->kind == RoleKind::feed_ended; },
                caf::after(std::chrono::seconds(30)) >> [] {});
  EXPECT_TRUE(done);
  ::close(fds[0]);
  (void)reader;
}

}  // namespace
}  // namespace chorus
