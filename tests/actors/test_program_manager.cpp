// ProgramManager: the program policy applied to programs on a live batcher, their phase told by
// tool calls as a topology program's roles tell it.
#include <gtest/gtest.h>

#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "actors/program_manager.h"
#include "actors/submit.h"
#include "tests/support/actors_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

// Polls `cond` until it holds or 20 s pass.
template <class Cond>
bool eventually(Cond cond) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A pool of 20 pages (high watermark 19, low 17). Program 1 (8 pages) and program 2 (6 pages) are
// resident; program 3 is new and needs 8. Program 1 has been in a tool call for 6 decay times
// (its pages weigh 1/8 of a page); program 2 waits for an event (its 6 pages weigh fully). So
// program 3's first request is admitted under the low watermark, and the acting program in the
// tool call is the victim that makes its room — not program 2, the smaller one, which a policy
// blind to tool calls would pause. Then program 1's tool returns and its next request waits in
// the batcher until a check brings it back: nothing is running, so the idle program makes way
// and program 1's dropped pages are prefilled again.
TEST_F(ActorsFixture, ManagerPausesProgramsInToolCallsToAdmitReadyOnes) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf", 20);
  caf::scoped_actor self{*sys};
  auto block = [&](const char* name) { return new_block(self, name); };
  auto status = [&](uint64_t id) { return program_status(self, id); };
  std::vector<TokenId> text(128);  // 8 pages
  std::iota(text.begin(), text.end(), 3);
  const BlockId a = block("a"), b = block("b"), c = block("c");
  ASSERT_EQ(call(self, encode_request(0, Request::forward(a, text))).kind, ReplyKind::submitted);
  events_until_finished(self);
  ASSERT_EQ(call(self, encode_request(
                           0, Request::forward(b, std::vector<TokenId>(text.begin(), text.begin() + 96))))
                .kind,
            ReplyKind::submitted);
  events_until_finished(self);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 1, {a}, PauseMode::drop, true).pages, 8);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 2, {b}, PauseMode::drop, true).pages, 6);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 3, {c}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::pause, 3).state,
            ProgramState::paused);  // new: waits to be admitted

  ProgramPolicyOptions po;
  po.capacity_pages = 20;
  po.decay_tau_s = 0.05;  // a tool call makes a program light within a fraction of a second
  po.check_period_s = 0;  // no thread: only the checks this test makes
  ProgramManager mgr(*sys, batcher, po);
  mgr.add(1, 0);
  mgr.add(2, 0);
  mgr.add(3, 8);
  mgr.check();
  EXPECT_EQ(status(3).state, ProgramState::paused) << "admitted before it asked for anything";
  mgr.tool_started(1);
  // Program 3's first request (its initial text, say) waits in the batcher.
  std::atomic<bool> written{false};
  std::thread newcomer([&] {
    caf::scoped_actor other{*sys};
    if (call(other, encode_request(0, Request::forward(c, text))).kind != ReplyKind::submitted) return;
    events_until_finished(other);
    written = true;
  });
  ASSERT_TRUE(eventually([&] { return status(3).held == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // 6 tau
  mgr.check();
  newcomer.join();
  EXPECT_TRUE(written) << "the newcomer's held request never ran";
  const Reply one = status(1), two = status(2), three = status(3);
  EXPECT_EQ(one.state, ProgramState::paused) << "the program in a tool call was not paused";
  EXPECT_EQ(two.state, ProgramState::active) << "the program waiting for an event was paused";
  EXPECT_EQ(three.state, ProgramState::active);
  EXPECT_EQ(three.pages, 8);
  EXPECT_EQ(three.tokens, 128);
  ProgramManagerStats st = mgr.stats();
  EXPECT_EQ(st.admitted, 1);
  EXPECT_EQ(st.pauses, 1);
  EXPECT_EQ(st.restores, 0);
  EXPECT_EQ(st.peak_resident_pages, 14);

  // The tool returns: program 1 is not brought back until it asks.
  mgr.tool_ended(1);
  mgr.check();
  EXPECT_EQ(status(1).state, ProgramState::paused) << "restored with nothing to run";
  std::atomic<int> generated{0};
  std::thread goes_on([&] {
    caf::scoped_actor other{*sys};
    if (call(other, generate_into(a, 8)).kind != ReplyKind::submitted) return;
    for (const Reply& e : events_until_finished(other))
      generated += e.kind == ReplyKind::token && e.token >= 0;
  });
  ASSERT_TRUE(eventually([&] { return status(1).held == 1; }));
  mgr.check();  // 6 + 8 resident and idle, 8 wanted: over the low watermark, but nothing runs
  goes_on.join();
  EXPECT_EQ(generated, 8);
  EXPECT_EQ(status(1).state, ProgramState::active);
  EXPECT_EQ(status(2).state, ProgramState::paused) << "the smaller idle program should have made way";
  EXPECT_EQ(status(3).state, ProgramState::active);
  st = mgr.stats();
  EXPECT_EQ(st.pauses, 2);
  EXPECT_EQ(st.restores, 1);
  EXPECT_EQ(st.recomputed_tokens, 128);  // program 1's dropped pages, prefilled again
  EXPECT_EQ(st.refused, 0);
  // A program that ends leaves the manager; terminated while paused, its blocks are freed.
  mgr.remove(2);
  EXPECT_EQ(program_cmd(self, ProgramCmd::Op::terminate, 2).state, ProgramState::terminated);
  mgr.check();
  EXPECT_EQ(mgr.stats().programs, 2);
  EXPECT_EQ(mgr.stats().refused, 0);
}

// The batcher's half: a request of a program registered with `hold` starts only when the pool has
// room for everything it may write, counting what running ones may still write; until then it
// waits (the status says so) — here until the other program is paused, the scheduler's way of
// making room — and one that could never fit is refused at once. Without this gate the two
// generates below would run out of pages together (130 + 76 of 200).
TEST_F(ActorsFixture, ScheduledRequestsStartOnlyWithRoomForAllTheyMayWrite) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf", 200);
  caf::scoped_actor self{*sys};
  auto block = [&](const char* name) { return new_block(self, name); };
  auto status = [&](uint64_t id) { return program_status(self, id); };
  std::vector<TokenId> text(64);  // 4 pages
  std::iota(text.begin(), text.end(), 3);
  const BlockId a = block("a"), b = block("b");
  ASSERT_EQ(call(self, encode_request(0, Request::forward(a, text))).kind, ReplyKind::submitted);
  events_until_finished(self);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 1, {a}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 2, {b}, PauseMode::drop, true).kind,
            ReplyKind::program_status);

  const Reply never = call(self, generate_into(b, 4000));  // 251 pages
  EXPECT_EQ(never.kind, ReplyKind::error);
  EXPECT_EQ(never.text,
            "KV cache too small: the request may write 251 pages and its program holds 0; the pool has 200");
  // Beside its program's own pages (program 1 holds 4): 197 more cannot fit either.
  const Reply beside = call(self, generate_into(a, 16 * 201 - 65));
  EXPECT_EQ(beside.text,
            "KV cache too small: the request may write 197 pages and its program holds 4; the pool has 200");

  // Program 1 generates up to 2000 tokens: 126 more pages kept for it, 70 left.
  ASSERT_EQ(call(self, generate_into(a, 2000)).kind, ReplyKind::submitted);
  Reply one = status(1);
  EXPECT_GE(one.pending, 1);
  EXPECT_GT(one.wanted_pages, 0);
  EXPECT_LE(one.wanted_pages, 126);
  // Program 2 asks for up to 1200 (76 pages): it waits.
  std::atomic<bool> started{false};
  std::string finish;
  int tokens = 0;
  std::thread two([&] {
    caf::scoped_actor other{*sys};
    if (call(other, generate_into(b, 1200)).kind != ReplyKind::submitted) return;
    started = true;
    for (const Reply& e : events_until_finished(other)) {
      tokens += e.kind == ReplyKind::token && e.token >= 0;
      if (e.kind == ReplyKind::finished) finish = e.text;
    }
  });
  ASSERT_TRUE(eventually([&] { return status(2).held == 1 || started; }));
  const Reply waiting = status(2);
  EXPECT_FALSE(started) << "started without room";
  EXPECT_EQ(waiting.held, 1);
  EXPECT_EQ(waiting.pending, 0);
  EXPECT_EQ(waiting.wanted_pages, 76);
  std::string first_finish;
  int first_tokens = 0;
  for (const Reply& e : events_until_finished(self)) {
    first_tokens += e.kind == ReplyKind::token && e.token >= 0;
    if (e.kind == ReplyKind::finished) first_finish = e.text;
  }
  EXPECT_EQ(first_tokens, 2000) << first_finish;
  // Program 1's 2065 tokens stay resident (130 pages): still no room, until it is paused.
  EXPECT_FALSE(started);
  EXPECT_EQ(status(1).wanted_pages, 0);
  EXPECT_EQ(status(2).held, 1);
  EXPECT_EQ(program_cmd(self, ProgramCmd::Op::pause, 1).state, ProgramState::paused);
  two.join();
  EXPECT_TRUE(started);
  EXPECT_EQ(tokens, 1200) << finish;
  EXPECT_EQ(status(2).held, 0);
  EXPECT_EQ(status(2).wanted_pages, 0);
}

// A terminate refuses while a request uses the program's blocks — unless it cancels them: then
// the request ends first, its subscriber told why, and the blocks are freed.
TEST_F(ActorsFixture, TerminateWithCancelEndsTheRequestsUsingItsBlocks) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  const BlockId a = new_block(self, "a");
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 4, {a}).kind, ReplyKind::program_status);
  ASSERT_EQ(call(self, generate_into(a, 5000)).kind, ReplyKind::submitted);
  const Reply refused = program_cmd(self, ProgramCmd::Op::terminate, 4);
  EXPECT_EQ(refused.kind, ReplyKind::error);
  EXPECT_NE(refused.text.find("pending request"), std::string::npos) << refused.text;
  ProgramCmd end;
  end.op = ProgramCmd::Op::terminate;
  end.program = 4;
  end.cancel = true;
  EXPECT_EQ(call(self, encode_program(0, end)).state, ProgramState::terminated);
  const std::vector<Reply> events = events_until_finished(self);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().reason, FinishReason::error);
  EXPECT_EQ(events.back().text, "cancelled: program 4 was terminated");
  EXPECT_LT(events.size(), 5000u);
  EXPECT_EQ(call(self, encode_snapshot_view(0, {a})).kind, ReplyKind::error) << "its block was not freed";
}

// Two writers of one block are counted together: the room kept for the block is where both may
// take it (802 tokens, 51 pages), not each one's growth from where the block was when it started
// (which shrinks as the other writes). So a third request that needs 31 of the 80 pages waits
// while 51 are spoken for — even once both have finished, until their program is paused — and
// nobody runs out.
TEST_F(ActorsFixture, SharedWritersOfABlockAreCountedTogether) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf", 80);
  caf::scoped_actor self{*sys};
  auto block = [&](const char* name) { return new_block(self, name); };
  const BlockId a = block("a"), b = block("b");
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 1, {a}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 2, {b}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  struct Run {
    std::thread t;
    std::atomic<bool> started{false};
    int tokens = 0;
    std::string error;
  };
  auto run = [&](Run& r, BlockId blk, int max_tokens) {
    r.t = std::thread([&, blk, max_tokens] {
      caf::scoped_actor other{*sys};
      const Reply sub = call(other, generate_into(blk, max_tokens));
      if (sub.kind != ReplyKind::submitted) {
        r.error = sub.text;
        return;
      }
      r.started = true;
      for (const Reply& e : events_until_finished(other)) {
        r.tokens += e.kind == ReplyKind::token && e.token >= 0;
        if (e.kind == ReplyKind::finished && e.reason != FinishReason::max_tokens) r.error = e.text;
      }
    });
  };
  Run a1, a2, b1;
  run(a1, a, 400);
  ASSERT_TRUE(eventually([&] { return a1.started.load(); }));
  run(a2, a, 400);
  ASSERT_TRUE(eventually([&] { return a2.started.load(); })) << "the second writer needed 25 pages of 54";
  run(b1, b, 480);
  a1.t.join();
  a2.t.join();
  EXPECT_EQ(a1.tokens, 400) << a1.error;
  EXPECT_EQ(a2.tokens, 400) << a2.error;
  ASSERT_TRUE(eventually([&] { return program_status(self, 2).held == 1 || b1.started; }));
  EXPECT_FALSE(b1.started) << "started into room the two writers of block a keep";
  EXPECT_EQ(program_cmd(self, ProgramCmd::Op::pause, 1).state, ProgramState::paused);
  b1.t.join();
  EXPECT_EQ(b1.tokens, 480) << b1.error;
}

// Every resident program waiting for room: nothing runs, so nothing frees a page — unless the
// manager pauses one of them, which it may (a program whose request waits for room is not
// pinned). Two programs of 9 pages on 20, each asking for 3 more: one is paused, the other runs,
// then the first comes back and runs too.
TEST_F(ActorsFixture, ProgramsAllWaitingForRoomAreNotStuck) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf", 20);
  caf::scoped_actor self{*sys};
  std::vector<TokenId> text(144);  // 9 pages
  std::iota(text.begin(), text.end(), 3);
  const BlockId a = new_block(self, "a"), b = new_block(self, "b");
  for (auto [id, blk] : {std::pair{1, a}, std::pair{2, b}}) {
    ASSERT_EQ(call(self, encode_request(0, Request::forward(blk, text))).kind, ReplyKind::submitted);
    events_until_finished(self);
    ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, id, {blk}, PauseMode::drop, true).pages, 9);
  }
  ProgramPolicyOptions po;
  po.capacity_pages = 20;
  po.check_period_s = 0;
  ProgramManager mgr(*sys, batcher, po);
  mgr.add(1, 0);
  mgr.add(2, 0);
  std::atomic<int> done{0}, tokens{0};
  auto turn = [&](BlockId blk) {  // 1 + 40 tokens: 3 more pages
    return std::thread([&, blk] {
      caf::scoped_actor other{*sys};
      if (call(other, generate_into(blk, 40)).kind != ReplyKind::submitted) return;
      for (const Reply& e : events_until_finished(other))
        tokens += e.kind == ReplyKind::token && e.token >= 0;
      ++done;
    });
  };
  std::thread one = turn(a), two = turn(b);
  ASSERT_TRUE(eventually([&] { return program_status(self, 1).held + program_status(self, 2).held == 2; }))
      << "both should wait: 2 pages free, 3 wanted each";
  EXPECT_TRUE(eventually([&] {
    mgr.check();
    return done == 2;
  })) << "stuck: every program waits for room";
  one.join();
  two.join();
  EXPECT_EQ(tokens, 80);
  EXPECT_GE(mgr.stats().pauses, 1);
}

// A block operation on a paused program registered with `hold` (a source clearing its window
// while the program is paused) waits for the restore like a request, and the program's status
// counts it — what brings a scheduler to restore the program.
TEST_F(ActorsFixture, BlockOperationsOnAPausedProgramWaitForItsRestore) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  const BlockId a = new_block(self, "window");
  ASSERT_EQ(call(self, encode_request(0, Request::forward(a, {5, 6, 7, 8}))).kind, ReplyKind::submitted);
  events_until_finished(self);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 3, {a}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::pause, 3).state, ProgramState::paused);
  std::string cleared;
  std::thread source([&] {
    caf::scoped_actor other{*sys};
    const Reply r = call(other, encode_clear_block(0, a));
    cleared = reply_kind_name(r.kind) + std::string(" ") +
              std::to_string(r.blocks.empty() ? -1 : r.blocks[0].tokens);
  });
  ASSERT_TRUE(eventually([&] { return program_status(self, 3).held == 1; }));
  EXPECT_TRUE(cleared.empty()) << "answered while its program was paused: " << cleared;
  EXPECT_EQ(program_cmd(self, ProgramCmd::Op::restore, 3).state, ProgramState::active);
  source.join();
  EXPECT_EQ(cleared, "BlockInfo 0");
}

// A client gives up waiting for a restore: WithdrawRequest takes back exactly the request it
// names (by its envelope's request id) while it waits — it ends with out_of_memory, saying so —
// and finds nothing once a request has started (that one runs on).
TEST_F(ActorsFixture, AWaitingRequestCanBeWithdrawnAndAStartedOneRunsOn) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  const BlockId a = new_block(self, "a");
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 4, {a}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::pause, 4).state, ProgramState::paused);
  auto withdraw = [&](uint64_t request) {
    ProgramCmd w;
    w.op = ProgramCmd::Op::withdraw;
    w.program = 4;
    w.request = request;
    caf::scoped_actor other{*sys};
    return ask(other, batcher, encode_program(0, w), std::chrono::seconds(30));
  };
  StopCondition stop;
  stop.max_tokens = 4;
  stop.at_end_of_generation = false;
  const Request gen = Request::generate(a, {a}, {3}, SamplingParams::greedy(), stop);
  auto held = self->request(batcher, std::chrono::seconds(30), frame_atom::value, encode_request(7, gen));
  ASSERT_TRUE(eventually([&] {
    caf::scoped_actor other{*sys};
    return program_status(other, 4).held == 1;
  }));
  EXPECT_EQ(withdraw(8).error().code, Errc::not_found) << "another request id: nothing to take back";
  auto w = withdraw(7);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(w->held, 0);
  Result<Reply> r = make_error(Errc::internal, "no reply");
  std::move(held).receive([&](const std::vector<uint8_t>& f) { r = decode_reply(f); },
                          [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, ReplyKind::error);
  EXPECT_EQ(r->code, Errc::withdrawn) << "its own code, not a full pool's";
  EXPECT_NE(r->text.find("withdrawn"), std::string::npos) << r->text;
  EXPECT_EQ(withdraw(7).error().code, Errc::not_found) << "taken back once";

  // Restored, the next request starts at once: nothing waits, and it runs to its end.
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::restore, 4).state, ProgramState::active);
  ASSERT_EQ(call(self, encode_request(9, gen)).kind, ReplyKind::submitted);
  EXPECT_EQ(withdraw(9).error().code, Errc::not_found);
  const std::vector<Reply> events = events_until_finished(self);
  EXPECT_EQ(events.back().reason, FinishReason::max_tokens);
  EXPECT_EQ(events.size(), 5u);  // 4 tokens, then the end
}

// The batcher tells the manager when a scheduled program's request waits, so a paused program
// that asks for the engine comes back at once, not at the next periodic check (an hour here).
TEST_F(ActorsFixture, TheBatcherWakesTheManagerWhenARequestWaits) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf");
  caf::scoped_actor self{*sys};
  const BlockId a = new_block(self, "a");
  ASSERT_EQ(call(self, encode_request(0, Request::forward(a, {5, 6, 7, 8}))).kind, ReplyKind::submitted);
  events_until_finished(self);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 1, {a}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::pause, 1).state, ProgramState::paused);
  ProgramPolicyOptions po;
  po.capacity_pages = 512;
  po.check_period_s = 3600;
  ProgramManager mgr(*sys, batcher, po);
  mgr.add(1, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its first check: nothing asked yet
  EXPECT_EQ(program_cmd(self, ProgramCmd::Op::phase, 1).state, ProgramState::paused)
      << "restored before it asked";
  std::atomic<bool> done{false};
  std::thread asks([&] {
    caf::scoped_actor other{*sys};
    if (call(other, encode_request(0, Request::forward(a, {9, 10}))).kind != ReplyKind::submitted) return;
    events_until_finished(other);
    done = true;
  });
  EXPECT_TRUE(eventually([&] { return done.load(); })) << "the held request waited for the periodic check";
  asks.join();
  EXPECT_EQ(program_cmd(self, ProgramCmd::Op::phase, 1).state, ProgramState::active);
  EXPECT_EQ(mgr.stats().admitted, 1);
}

// A paused program's tool environment is removed once it has waited past the lease with
// nothing to do, and made again when the program comes near the head of the restore queue —
// ahead of its restore, not at it. Program 1 (8 pages) and program 3 (12, with tools) both ask
// for the engine; under the low watermark (17 of 20 pages) only program 1 comes back, and
// program 3, next in the queue, gets its sandbox back while it waits.
TEST_F(ActorsFixture, ToolEnvironmentsGoPastTheLeaseAndComeBackAheadOfTheRestore) {
  start(test::goldens_dir() + "/tiny_llama_f32.gguf", 20);
  caf::scoped_actor self{*sys};
  auto block = [&](const char* name) { return new_block(self, name); };
  auto state = [&](uint64_t id) { return program_cmd(self, ProgramCmd::Op::phase, id).state; };
  const BlockId a = block("a"), c = block("c");
  std::vector<TokenId> text(192);
  std::iota(text.begin(), text.end(), 3);
  ASSERT_EQ(call(self, encode_request(
                           0, Request::forward(a, std::vector<TokenId>(text.begin(), text.begin() + 128))))
                .kind,
            ReplyKind::submitted);
  events_until_finished(self);
  ASSERT_EQ(call(self, encode_request(0, Request::forward(c, text))).kind, ReplyKind::submitted);
  events_until_finished(self);
  for (auto [id, b] : {std::pair{1, a}, std::pair{3, c}}) {
    ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, id, {b}, PauseMode::drop, true).kind,
              ReplyKind::program_status);
    ASSERT_EQ(program_cmd(self, ProgramCmd::Op::pause, id).state, ProgramState::paused);
  }
  ProgramPolicyOptions po;
  po.capacity_pages = 20;
  po.check_period_s = 0;
  ProgramManager mgr(*sys, batcher, po, /*tool_lease_s=*/0.05);
  std::atomic<int> cooled{0}, warmed{0};
  mgr.add(1, 8);
  mgr.add(3, 12, ProgramTools{[&] { ++cooled; }, [&] { ++warmed; }});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  mgr.check();
  EXPECT_EQ(cooled, 1) << "paused and idle past the lease: its sandbox should go";
  EXPECT_EQ(warmed, 0);
  std::atomic<int> written{0};
  auto ask = [&](BlockId b) {
    return std::thread([&, b] {
      caf::scoped_actor other{*sys};
      if (call(other, encode_request(0, Request::forward(b, {1}))).kind != ReplyKind::submitted) return;
      events_until_finished(other);
      ++written;
    });
  };
  std::thread one = ask(a), three = ask(c);
  ASSERT_TRUE(eventually([&] {
    return program_cmd(self, ProgramCmd::Op::phase, 1).held == 1 &&
           program_cmd(self, ProgramCmd::Op::phase, 3).held == 1;
  }));
  mgr.check();
  EXPECT_EQ(state(1), ProgramState::active);
  EXPECT_EQ(state(3), ProgramState::paused) << "both restored over the low watermark";
  EXPECT_EQ(warmed, 1) << "next in the queue: its sandbox should be made again while it waits";
  one.join();
  EXPECT_TRUE(mgr.remove(1));
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::terminate, 1).state, ProgramState::terminated);
  mgr.check();
  three.join();
  EXPECT_EQ(written, 2);
  EXPECT_EQ(state(3), ProgramState::active);
  EXPECT_EQ(warmed, 1) << "made twice";
  EXPECT_EQ(cooled, 1);
  const ProgramManagerStats st = mgr.stats();
  EXPECT_EQ(st.tools_cooled, 1);
  EXPECT_EQ(st.tools_prewarmed, 1);
  EXPECT_EQ(st.tools_warmed_late, 0);
}

// Many scheduled programs on a small pool, under the manager: random turns (prompts and
// generates of random sizes, some programs writing one block from two roles at once), the
// manager pausing and restoring as it sees fit. However it schedules them, no request runs out of
// pages (no context_full), every one ends — none stuck behind another — and each turn writes all
// it was asked to.
TEST_F(ActorsFixture, ManyScheduledProgramsNeverRunOutAndAllFinish) {
  constexpr int kPages = 48, kPrograms = 6, kTurns = 12;
  start(test::goldens_dir() + "/tiny_llama_f32.gguf", kPages);
  caf::scoped_actor self{*sys};
  std::vector<BlockId> blocks;
  for (int p = 1; p <= kPrograms; ++p) {
    blocks.push_back(new_block(self, "b" + std::to_string(p)));
    ASSERT_EQ(
        program_cmd(self, ProgramCmd::Op::register_program, p, {blocks.back()}, PauseMode::drop, true).kind,
        ReplyKind::program_status);
  }
  ProgramPolicyOptions po;
  po.capacity_pages = kPages;
  po.check_period_s = 0.02;
  po.decay_tau_s = 0.05;
  ProgramManager mgr(*sys, batcher, po);
  for (int p = 1; p <= kPrograms; ++p) mgr.add(p, 1);
  std::atomic<int> context_full{0}, errors{0}, short_turns{0}, turns{0};
  std::string first_error;
  std::mutex m;
  std::vector<std::thread> roles;
  for (int p = 0; p < kPrograms; ++p)
    for (int role = 0; role < (p % 3 == 0 ? 2 : 1); ++role)  // programs 1 and 4: two writers of one block
      roles.emplace_back([&, p, role] {
        caf::scoped_actor other{*sys};
        std::mt19937 rng(100 * p + role);
        for (int turn = 0; turn < kTurns; ++turn) {
          const int n = std::uniform_int_distribution<int>(1, 40)(rng);
          const bool generate = rng() % 2 == 0;
          std::vector<TokenId> toks(static_cast<size_t>(generate ? 1 : n), 5 + turn);
          const Frame f = generate ? generate_into(blocks[p], n)
                                   : encode_request(0, Request::forward(blocks[p], toks, {blocks[p]}));
          const Reply sub = call(other, f);
          if (sub.kind != ReplyKind::submitted) {
            std::lock_guard<std::mutex> l(m);
            ++errors;
            if (first_error.empty()) first_error = sub.text;
            continue;
          }
          int got = 0;
          for (const Reply& e : events_until_finished(other)) {
            got += e.kind == ReplyKind::token && e.token >= 0;
            if (e.kind == ReplyKind::finished && e.reason == FinishReason::context_full) ++context_full;
            if (e.kind == ReplyKind::finished && e.reason == FinishReason::error) ++errors;
          }
          if (generate && got != n) ++short_turns;
          ++turns;
          // Between turns: a "tool call" now and then, so the manager has programs to pause.
          if (rng() % 3 == 0) {
            mgr.tool_started(p + 1);
            std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 60));
            mgr.tool_ended(p + 1);
          }
        }
      });
  for (auto& r : roles) r.join();
  const int expected = kTurns * (kPrograms + 2);
  EXPECT_EQ(turns, expected) << "first refusal: " << first_error;
  EXPECT_EQ(context_full, 0) << "a scheduled request ran out of pages";
  EXPECT_EQ(errors, 0) << first_error;
  EXPECT_EQ(short_turns, 0);
  EXPECT_GT(mgr.stats().pauses, 0) << "the pool was never short: the test does not test the scheduler";
}

}  // namespace
}  // namespace chorus
