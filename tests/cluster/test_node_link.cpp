// A node link (cluster/node_link.h): in front of a real node port it behaves like the node's
// memory actor; in front of a node that goes silent or talks garbage, everyone waiting is told.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <zmq.hpp>

#include "actors/node_port.h"
#include "cluster/node_link.h"
#include "net/block_transfer.h"
#include "net/wire.h"
#include "tests/support/actors_fixture.h"
#include "tests/support/test_util.h"

namespace chorus::cluster {
namespace {

using namespace std::chrono_literals;

template <class F>
bool eventually(F cond, std::chrono::milliseconds limit = 10s) {
  for (auto until = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < until;) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return cond();
}

struct NodeLinkTest : ActorsFixture {
  void TearDown() override {
    if (link) caf::anon_send(link, stop_atom::value);
    if (port) caf::anon_send_exit(port, caf::exit_reason::user_shutdown);
    ActorsFixture::TearDown();
  }
  void open_link(const std::string& endpoint, double heartbeat_s = 0.1, double dead_after_s = 0.6,
                 const CurveKeys& curve = {}, const std::string& server_key = "") {
    NodeLinkOptions o;
    o.name = "n1";
    o.endpoint = endpoint;
    o.heartbeat_s = heartbeat_s;
    o.dead_after_s = dead_after_s;
    o.curve = curve;
    o.server_key = server_key;
    auto l = spawn_node_link(*sys, zctx, o, health);
    ASSERT_TRUE(l.ok()) << l.error().message;
    link = *l;
  }
  // The node port over the fixture's batcher, and a link to it.
  void open_port_and_link() {
    NodePortOptions po;
    po.endpoint = "tcp://127.0.0.1:*";
    po.events_endpoint = "";
    auto bound = spawn_node_port(*sys, batcher, zctx, po, &port);
    ASSERT_TRUE(bound.ok());
    ASSERT_NO_FATAL_FAILURE(open_link(bound->requests));
  }
  Reply call_on(caf::scoped_actor& self, const caf::actor& to, const Frame& f) {
    Reply out;
    self->request(to, std::chrono::seconds(30), frame_atom::value, f)
        .receive([&](const std::vector<uint8_t>& r) { out = *decode_reply(r); },
                 [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    return out;
  }
  zmq::context_t zctx{1};  // outlives the link and the port (declared after sys: destroyed before it)
  std::shared_ptr<NodeHealth> health = std::make_shared<NodeHealth>();
  caf::actor link, port;
};

// The events of one request, until it finishes (at most 30 s).
// A request's events up to its RequestFinished; the BlockGrown events that come among them (a
// watched block's) go to `grown` (their cached lengths), when given.
std::vector<Reply> events_of(caf::scoped_actor& self, std::vector<int64_t>* grown = nullptr) {
  std::vector<Reply> out;
  for (bool done = false; !done;)
    self->receive(
        [&](event_atom, const std::vector<uint8_t>& f) {
          Reply r = *decode_reply(f);
          if (r.kind == ReplyKind::block_grown) {
            if (grown) grown->push_back(r.tokens);
            return;
          }
          out.push_back(std::move(r));
          done = out.back().kind == ReplyKind::finished;
        },
        caf::after(30s) >>
            [&] {
              ADD_FAILURE() << "no event for 30 s after " << out.size();
              done = true;
            });
  return out;
}

std::vector<TokenId> tokens_of(const std::vector<Reply>& events) {
  std::vector<TokenId> t;
  for (const Reply& r : events)
    if (r.kind == ReplyKind::token && r.token >= 0) t.push_back(r.token);
  return t;
}

TEST_F(NodeLinkTest, StandsForTheNodesMemoryActor) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  ASSERT_NO_FATAL_FAILURE(start(default_model_path(), 96));
  caf::scoped_actor self{*sys};
  // The same greedy generation, directly and through the link, gives the same tokens.
  const BlockId direct = new_block(self, "direct");
  ASSERT_EQ(call(self, generate_into(direct, 12)).kind, ReplyKind::submitted);
  const auto want = tokens_of(events_of(self));
  ASSERT_EQ(want.size(), 12u);

  ASSERT_NO_FATAL_FAILURE(open_port_and_link());
  ASSERT_TRUE(eventually([&] { return health->up.load() && health->pages_total.load() == 96; }))
      << "a heartbeat answered with the node's pool";

  const Reply made = call_on(self, link, with_request_id(encode_create_block(0, "remote"), 41).value());
  ASSERT_EQ(made.kind, ReplyKind::block_info);
  Frame gen = with_request_id(generate_into(static_cast<BlockId>(made.id), 12), 42).value();
  Reply submitted;
  self->request(link, 30s, frame_atom::value, gen)
      .receive(
          [&](const std::vector<uint8_t>& r) {
            submitted = *decode_reply(r);
            EXPECT_EQ(decode_envelope(r)->request_id, 42u) << "the reply comes back under the requester's id";
          },
          [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  ASSERT_EQ(submitted.kind, ReplyKind::submitted);
  const auto events = events_of(self);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(tokens_of(events), want);
  EXPECT_EQ(events.back().reason, FinishReason::max_tokens);
  // Errors keep their class across the link.
  const Reply bad = call_on(self, link, encode_free_block(0, 999));
  EXPECT_EQ(bad.kind, ReplyKind::error);
  EXPECT_EQ(bad.code, Errc::not_found) << bad.text;
  EXPECT_TRUE(eventually([&] { return health->in_flight.load() == 0; }));
}

// A role that watches a block on a node (a probe's `watch`, in a topology program the coordinator
// runs) sends (subscribe_atom, block) to the link as it would to a local memory actor, and hears
// a BlockGrown event after each step in which the block's cached length changed: the
// link asks the node with WatchBlock, the node answers with BlockGrown frames. Two watchers of
// one block each hear every step, the same cached lengths, growing to the block's own.
TEST_F(NodeLinkTest, AWatchedBlocksGrowthComesBackOverTheLink) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  ASSERT_NO_FATAL_FAILURE(start(default_model_path(), 96));
  ASSERT_NO_FATAL_FAILURE(open_port_and_link());
  ASSERT_TRUE(eventually([&] { return health->up.load(); }));
  caf::scoped_actor self{*sys}, other{*sys};
  const Reply made = call_on(self, link, encode_create_block(0, "watched"));
  ASSERT_EQ(made.kind, ReplyKind::block_info);
  const auto block = static_cast<BlockId>(made.id);
  self->send(link, subscribe_atom::value, block);
  other->send(link, subscribe_atom::value, block);
  ASSERT_EQ(call_on(self, link, generate_into(block, 12)).kind, ReplyKind::submitted);
  std::vector<int64_t> mine;  // what came among the generate's own events
  const auto events = events_of(self, &mine);
  ASSERT_EQ(tokens_of(events).size(), 12u);
  // The block's own length, as the node reports it.
  const Reply info = call_on(self, link, encode_snapshot_view(0, {block}));
  ASSERT_EQ(info.blocks.size(), 1u);
  const int64_t cached = info.blocks[0].cached;
  ASSERT_GT(cached, 0);
  auto growth = [&](caf::scoped_actor& who, std::vector<int64_t> seen) {
    for (bool done = !seen.empty() && seen.back() >= cached; !done;)
      who->receive(
          [&](event_atom, const std::vector<uint8_t>& f) {
            auto r = decode_reply(f);
            ASSERT_TRUE(r.ok() && r->kind == ReplyKind::block_grown);
            EXPECT_EQ(r->id, block);
            seen.push_back(r->tokens);
            done = r->tokens >= cached;
          },
          caf::after(10s) >> [&] { done = true; });
    return seen;
  };
  mine = growth(self, mine);
  const auto theirs = growth(other, {});
  ASSERT_GE(mine.size(), 2u) << "one event per step that grew the block";
  EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()) &&
              std::adjacent_find(mine.begin(), mine.end()) == mine.end())
      << "strictly growing";
  EXPECT_EQ(mine.back(), cached);
  EXPECT_EQ(theirs, mine);
}

// A block's image travels over the link in parts (ExportBlock / LoadBlock) into a paused
// program's new block; restored, it continues with the tokens the original block gives. Parts
// out of order, and an image larger than the pool, are refused without loading anything.
TEST_F(NodeLinkTest, ABlockMovesByItsKvInParts) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  ASSERT_NO_FATAL_FAILURE(start(default_model_path(), 96));
  ASSERT_NO_FATAL_FAILURE(open_port_and_link());
  caf::scoped_actor self{*sys};
  const FrameCall over_link = [&](const Frame& f) -> Result<Reply> {
    Reply r = call_on(self, link, f);
    if (r.kind == ReplyKind::error) return make_error(r.code, r.text);
    return r;
  };
  const BlockId from = new_block(self, "from");
  ASSERT_EQ(call(self, generate_into(from, 30)).kind, ReplyKind::submitted);
  events_of(self);
  // The destination: a program's empty block, paused (as the gateway makes a new program).
  const BlockId to = new_block(self, "to");
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::register_program, 5, {to}, PauseMode::drop, true).kind,
            ReplyKind::program_status);
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::pause, 5).kind, ReplyKind::program_status);
  // What a coordinator that takes over reads back: the programs registered, and a block's log.
  const Reply listed = call_on(self, link, encode_list_programs(0));
  ASSERT_EQ(listed.kind, ReplyKind::program_list);
  ASSERT_EQ(listed.programs.size(), 1u);
  EXPECT_EQ(listed.programs[0].program, 5u);
  EXPECT_EQ(listed.programs[0].blocks, std::vector<BlockId>{to});
  EXPECT_EQ(listed.programs[0].state, ProgramState::paused);
  EXPECT_TRUE(listed.programs[0].hold);
  const Reply logs = call_on(self, link, encode_snapshot_view(0, {from}, true));
  ASSERT_EQ(logs.blocks.size(), 1u);
  ASSERT_EQ(logs.blocks[0].log.size(), 31u);
  EXPECT_EQ(logs.blocks[0].log.front(), 3) << "the prefill token generate_into starts from";
  EXPECT_TRUE(call_on(self, link, encode_snapshot_view(0, {from})).blocks[0].log.empty())
      << "only when asked";

  auto image = fetch_block(over_link, from, 100000);  // several parts (a page is 737,280 bytes here)
  ASSERT_TRUE(image.ok()) << image.error().to_string();
  ASSERT_EQ(image->tokens.size(), 31u);
  ASSERT_EQ(image->cached, 31);
  EXPECT_EQ(image->tokens, logs.blocks[0].log);
  // Out of order: refused, nothing loaded.
  BlockPartData late;
  late.block = to;
  late.total = image->kv.size();
  late.offset = 4096;
  late.kv.resize(10);
  const Reply refused = call_on(self, link, encode_load_block(0, late));
  EXPECT_EQ(refused.kind, ReplyKind::error);
  EXPECT_NE(refused.text.find("no load is under way"), std::string::npos) << refused.text;
  BlockImage huge = *image;
  huge.kv.resize(97 * 737280);
  const Status too_big = send_block(over_link, to, huge);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.error().message.find("of the whole pool"), std::string::npos) << too_big.error().message;

  ASSERT_TRUE(send_block(over_link, to, *image, 300000).ok());
  ASSERT_EQ(program_cmd(self, ProgramCmd::Op::restore, 5).kind, ReplyKind::program_status);
  const Reply moved = call_on(self, link, encode_snapshot_view(0, {to}));
  ASSERT_EQ(moved.blocks.size(), 1u);
  EXPECT_EQ(moved.blocks[0].tokens, 31);
  EXPECT_EQ(moved.blocks[0].cached, 31) << "restored from the image, not recomputed";
  StopCondition stop;
  stop.max_tokens = 10;
  stop.at_end_of_generation = false;
  ASSERT_EQ(
      call(self, encode_request(0, Request::generate(from, {from}, {5}, SamplingParams::greedy(), stop)))
          .kind,
      ReplyKind::submitted);
  const auto want = tokens_of(events_of(self));
  ASSERT_EQ(
      call(self, encode_request(0, Request::generate(to, {to}, {5}, SamplingParams::greedy(), stop))).kind,
      ReplyKind::submitted);
  EXPECT_EQ(tokens_of(events_of(self)), want);
}

// A request that waits in the node (its program paused, registered with `hold`) holds up nothing
// else on the port, and a scheduler over the link hears that it waits.
TEST_F(NodeLinkTest, AWaitingRequestHoldsUpNoOtherAndItsSchedulerIsTold) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  ASSERT_NO_FATAL_FAILURE(start(default_model_path(), 96));
  ASSERT_NO_FATAL_FAILURE(open_port_and_link());
  ASSERT_TRUE(eventually([&] { return health->up.load(); }));
  caf::scoped_actor self{*sys}, scheduler{*sys};
  scheduler->send(link, scheduler_atom::value);  // as a ProgramManager over the link does
  const BlockId b = static_cast<BlockId>(call_on(self, link, encode_create_block(0, "held")).id);
  ProgramCmd reg = ProgramCmd::of(ProgramCmd::Op::register_program, 7);
  reg.blocks = {b};
  reg.hold = true;
  ASSERT_EQ(call_on(self, link, encode_program(0, reg)).kind, ReplyKind::program_status);
  ASSERT_EQ(call_on(self, link, encode_program(0, ProgramCmd::of(ProgramCmd::Op::pause, 7))).kind,
            ReplyKind::program_status);
  caf::scoped_actor waiter{*sys};
  waiter->send(link, frame_atom::value, with_request_id(generate_into(b, 4), 77).value());
  bool told = false;
  scheduler->receive([&](waiting_atom, uint64_t program) { told = program == 7; },
                     caf::after(10s) >> [] { ADD_FAILURE() << "the scheduler was not told"; });
  EXPECT_TRUE(told);
  // Meanwhile the port answers others at once.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(call_on(self, link, encode_create_block(0, "other")).kind, ReplyKind::block_info);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_TRUE(health->up.load()) << "heartbeats were answered while the request waited";
  // The restore lets it in: its Submitted, then its 4 tokens.
  ASSERT_EQ(call_on(self, link, encode_program(0, ProgramCmd::of(ProgramCmd::Op::restore, 7))).kind,
            ReplyKind::program_status);
  Reply submitted;
  waiter->receive([&](const std::vector<uint8_t>& r) { submitted = *decode_reply(r); },
                  caf::after(30s) >> [] { ADD_FAILURE() << "no answer after the restore"; });
  EXPECT_EQ(submitted.kind, ReplyKind::submitted);
  EXPECT_EQ(tokens_of(events_of(waiter)).size(), 4u);
}

// A node the test plays by hand: a ROUTER socket.
struct FakeNode {
  zmq::socket_t sock;
  std::string endpoint, peer;
  explicit FakeNode(zmq::context_t& ctx) : sock(ctx, zmq::socket_type::router) {
    sock.set(zmq::sockopt::linger, 0);
    sock.bind("tcp://127.0.0.1:*");
    endpoint = sock.get(zmq::sockopt::last_endpoint);
  }
  // The next frame from the link that is not a heartbeat (heartbeats are answered while waiting,
  // when `answer_beats`).
  std::optional<std::pair<EnvelopeSummary, Frame>> next(bool answer_beats,
                                                        std::chrono::milliseconds limit = 5s) {
    for (auto until = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < until;) {
      zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) <= 0) continue;
      zmq::message_t id, m;
      (void)sock.recv(id);
      (void)sock.recv(m);
      peer.assign(id.data<char>(), id.size());
      Frame f(m.data<uint8_t>(), m.data<uint8_t>() + m.size());
      auto s = decode_envelope(f);
      if (!s) continue;
      if (s->payload_type == "Heartbeat") {
        if (answer_beats) send(encode_heartbeat(s->request_id, "", 3, 10));
        continue;
      }
      return std::make_pair(*s, f);
    }
    return std::nullopt;
  }
  void send(const Frame& f) {
    sock.send(zmq::buffer(peer), zmq::send_flags::sndmore);
    sock.send(zmq::buffer(f));
  }
};

TEST_F(NodeLinkTest, ANodeThatGoesSilentIsDownAndEveryoneWaitingIsTold) {
  cfg.set("scheduler.max-threads", 2);
  sys = std::make_unique<caf::actor_system>(cfg);
  FakeNode node(zctx);
  ASSERT_NO_FATAL_FAILURE(open_link(node.endpoint));
  caf::scoped_actor self{*sys};
  ASSERT_FALSE(node.next(true, 500ms));  // answers the heartbeats: connected
  ASSERT_TRUE(health->up.load());
  // A generation starts: Submitted, one token; garbage in between is dropped.
  self->send(link, frame_atom::value,
             encode_request(5, Request::generate(0, {0}, {3}, SamplingParams::greedy(), {})));
  auto gen = node.next(true);
  ASSERT_TRUE(gen);
  node.send(Frame{1, 2, 3, 4, 5, 6, 7, 8, 9});
  node.send(encode_submitted(gen->first.request_id, 7));
  Event tok;
  tok.type = Event::Type::token;
  tok.request = 7;
  tok.token = 11;
  node.send(encode_event(gen->first.request_id, tok, "x"));
  std::vector<Reply> got;
  for (int i = 0; i < 2; ++i)
    self->receive([&](const std::vector<uint8_t>& f) { got.push_back(*decode_reply(f)); },
                  [&](event_atom, const std::vector<uint8_t>& f) { got.push_back(*decode_reply(f)); },
                  caf::after(5s) >> [&] { ADD_FAILURE() << "nothing came"; });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].kind, ReplyKind::submitted);
  EXPECT_EQ(got[1].kind, ReplyKind::token);
  EXPECT_EQ(got[1].token, 11);
  EXPECT_TRUE(health->up.load());
  // A second command waits for an answer that never comes; the node stops answering heartbeats.
  self->send(link, frame_atom::value, encode_create_block(6, "late"));
  ASSERT_TRUE(node.next(false));
  Reply waited, finished;
  self->receive([&](const std::vector<uint8_t>& f) { waited = *decode_reply(f); },
                caf::after(5s) >> [&] { ADD_FAILURE() << "the waiting command was not answered"; });
  self->receive([&](event_atom, const std::vector<uint8_t>& f) { finished = *decode_reply(f); },
                caf::after(5s) >> [&] { ADD_FAILURE() << "the stream was not ended"; });
  EXPECT_EQ(waited.kind, ReplyKind::error);
  EXPECT_EQ(waited.code, Errc::io);
  EXPECT_NE(waited.text.find("node `n1` is down"), std::string::npos) << waited.text;
  EXPECT_EQ(finished.kind, ReplyKind::finished);
  EXPECT_EQ(finished.id, 7);
  EXPECT_EQ(finished.reason, FinishReason::error);
  EXPECT_TRUE(finished.node_lost) << "marked so that a gateway can resume it elsewhere";
  EXPECT_FALSE(health->up.load());
  // While down, a command is refused at once.
  const Reply refused = call_on(self, link, encode_create_block(0, "now"));
  EXPECT_EQ(refused.code, Errc::io);
  // A late answer to the command given up on is ignored; the node answering again is up again.
  node.send(encode_block_info(2, 1, "late", 0, 0));
  ASSERT_FALSE(node.next(true, 1500ms));  // answers heartbeats meanwhile
  EXPECT_TRUE(health->up.load());
  EXPECT_EQ(health->pages_total.load(), 10);
  EXPECT_EQ(health->in_flight.load(), 0);
}

TEST(NodeLink, BadOptionsAreRefused) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  zmq::context_t ctx{1};
  NodeLinkOptions o;
  o.endpoint = "tcp://127.0.0.1:1";
  o.heartbeat_s = 1;
  o.dead_after_s = 1;
  EXPECT_EQ(spawn_node_link(sys, ctx, o, std::make_shared<NodeHealth>()).error().code,
            Errc::invalid_argument);
  o.dead_after_s = 2;
  o.endpoint = "not an endpoint";
  EXPECT_EQ(spawn_node_link(sys, ctx, o, std::make_shared<NodeHealth>()).error().code, Errc::io);
}

// CURVE on the node port (net/curve.h): the coordinator's link gets in with an allowed key; a
// link with another key, one without CURVE, and one that expects another node key stay down,
// and the gate counts the refusal; the allowed link keeps working beside them.
TEST_F(NodeLinkTest, CurveLetsInOnlyAllowedKeys) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  ASSERT_NO_FATAL_FAILURE(start(default_model_path(), 96));
  const CurveKeys node = make_curve_keys().value(), coord = make_curve_keys().value(),
                  stranger = make_curve_keys().value();
  NodePortOptions po;
  po.endpoint = "tcp://127.0.0.1:*";
  po.events_endpoint = "tcp://127.0.0.1:*";
  po.curve = node;
  po.allowed = {{coord.public_key, "coordinator"}};
  auto bound = spawn_node_port(*sys, batcher, zctx, po, &port);
  ASSERT_TRUE(bound.ok()) << bound.error().message;
  ASSERT_EQ(bound->curve_key, node.public_key);
  ASSERT_NO_FATAL_FAILURE(open_link(bound->requests, 0.1, 0.6, coord, node.public_key));
  ASSERT_TRUE(eventually([&] { return health->up.load() && health->pages_total.load() == 96; }));
  EXPECT_GE(bound->gate->accepted(), 1);

  std::vector<caf::actor> others;
  std::vector<std::shared_ptr<NodeHealth>> their_health;
  for (const auto& [keys, server] : std::vector<std::pair<CurveKeys, std::string>>{
           {stranger, node.public_key}, {CurveKeys{}, ""}, {coord, stranger.public_key}}) {
    NodeLinkOptions o;
    o.name = "other";
    o.endpoint = bound->requests;
    o.heartbeat_s = 0.1;
    o.dead_after_s = 0.6;
    o.curve = keys;
    o.server_key = server;
    their_health.push_back(std::make_shared<NodeHealth>());
    others.push_back(spawn_node_link(*sys, zctx, o, their_health.back()).value());
  }
  EXPECT_TRUE(eventually([&] { return bound->gate->refused() >= 1; }))
      << "the unknown key is refused by the gate";
  std::this_thread::sleep_for(1500ms);
  for (size_t i = 0; i < their_health.size(); ++i)
    EXPECT_FALSE(their_health[i]->up.load()) << "link " << i << " got an answer";
  caf::scoped_actor self{*sys};
  EXPECT_EQ(call_on(self, link, with_request_id(encode_create_block(0, "x"), 7).value()).kind,
            ReplyKind::block_info);
  EXPECT_TRUE(health->up.load());
  for (auto& o : others) caf::anon_send(o, stop_atom::value);
}

TEST(Curve, KeyFilesRoundTripAndBadOnesAreNamed) {
  char tmpl[] = "/tmp/chorus-keys-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, base = dir + "/n";
  const CurveKeys keys = make_curve_keys().value();
  ASSERT_TRUE(write_curve_keys(keys, base, false).ok());
  EXPECT_EQ(write_curve_keys(keys, base, false).error().code, Errc::io) << "no silent replacement";
  struct stat st {};
  ASSERT_EQ(stat((base + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto back = read_curve_secret(base + ".key");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->public_key, keys.public_key);
  EXPECT_EQ(back->secret_key, keys.secret_key);
  EXPECT_EQ(read_curve_public(base + ".pub").value(), keys.public_key);
  EXPECT_EQ(read_curve_public(keys.public_key).value(), keys.public_key);

  // An allowlist: comments, a key with a `#` in it (a Z85 digit), names; then a bad line.
  std::string hash_key;
  for (int i = 0; i < 1000 && hash_key.empty(); ++i)
    if (auto k = make_curve_keys().value(); k.public_key.find('#') != std::string::npos)
      hash_key = k.public_key;
  ASSERT_FALSE(hash_key.empty()) << "no key with a # in 1000";
  std::ofstream(dir + "/allowed") << "# clients\n\n"
                                  << keys.public_key << "  laptop one\n"
                                  << hash_key << "\n";
  auto allowed = read_allowed_keys({dir + "/allowed", base + ".pub"});
  ASSERT_TRUE(allowed.ok()) << allowed.error().message;
  ASSERT_EQ(allowed->size(), 3u);
  EXPECT_EQ((*allowed)[0].name, "laptop one");
  EXPECT_EQ((*allowed)[1].key, hash_key);
  EXPECT_EQ((*allowed)[2].name, "n");
  std::ofstream(dir + "/bad") << keys.public_key << "\nnot-a-key\n";
  auto bad = read_allowed_keys({dir + "/bad"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(dir + "/bad:2:"), std::string::npos) << bad.error().message;

  // A key file: mode, a public key that is not the secret's, a missing line.
  chmod((base + ".key").c_str(), 0640);
  EXPECT_NE(read_curve_secret(base + ".key").error().message.find("chmod 600"), std::string::npos);
  const CurveKeys other = make_curve_keys().value();
  std::ofstream(dir + "/mixed.key") << "public " << other.public_key << "\nsecret " << keys.secret_key
                                    << "\n";
  chmod((dir + "/mixed.key").c_str(), 0600);
  EXPECT_NE(read_curve_secret(dir + "/mixed.key").error().message.find("not the secret key's"),
            std::string::npos);
  std::ofstream(dir + "/half.key") << "public " << keys.public_key << "\n";
  chmod((dir + "/half.key").c_str(), 0600);
  EXPECT_EQ(read_curve_secret(dir + "/half.key").error().code, Errc::bad_format);
  std::system(("rm -rf " + dir).c_str());
}

TEST(Curve, LoopbackEndpoints) {
  for (const char* ep : {"tcp://127.0.0.1:5555", "tcp://127.0.0.1:*", "tcp://localhost:1", "tcp://[::1]:5",
                         "tcp://127.1.2.3:9", "ipc:///tmp/x", "inproc://y"})
    EXPECT_TRUE(is_loopback_endpoint(ep)) << ep;
  for (const char* ep :
       {"tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://10.0.0.2:1", "tcp://[::]:5", "tcp://eth0:5",
        "tcp://127.0.0.1;10.0.0.2:5", "tcp://1270.0.0.1:5", "tcp://127.example.com:5", "pgm://x"})
    EXPECT_FALSE(is_loopback_endpoint(ep)) << ep;
}

TEST(Curve, OneGatePerContext) {
  zmq::context_t ctx(1);
  auto a = CurveGate::start(ctx, "d", {}, "test");
  ASSERT_TRUE(a.ok());
  auto b = CurveGate::start(ctx, "d", {}, "test");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, Errc::io);
}

}  // namespace
}  // namespace chorus::cluster
