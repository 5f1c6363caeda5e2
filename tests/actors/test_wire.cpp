// Envelopes: round trip, and every malformed frame rejected with a reason. Also the actor
// runtime self-test (CAF spawns, replies through FlatBuffers).
#include <gtest/gtest.h>

#include <random>

#include "actors/runtime_check.h"
#include "net/codec.h"
#include "net/hosting_codec.h"
#include "net/role_codec.h"
#include "net/wire.h"
#include "schemas/envelope_generated.h"

namespace chorus {
namespace {

TEST(Wire, ErrorEnvelopeRoundTrips) {
  const auto bytes = encode_error_envelope(42, make_error(Errc::bad_format, "frame too short"));
  auto s = decode_envelope(bytes);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->request_id, 42u);
  EXPECT_EQ(s->payload_type, "Error");
  EXPECT_EQ(s->text, "frame too short");
}

TEST(Wire, RejectsBadFrames) {
  const auto good = encode_hello_envelope(1, "node-a");
  ASSERT_TRUE(decode_envelope(good).ok());
  // Truncated at every length.
  // Truncated at every length: rejected, unless only trailing padding was cut (then the
  // content must be intact).
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = decode_envelope({good.data(), n});
    if (r.ok()) {
      EXPECT_EQ(r->text, "node-a") << "prefix " << n;
      EXPECT_GE(n, good.size() - 8) << "prefix " << n << " accepted";
    }
  }
  // Wrong identifier.
  auto wrong = good;
  wrong[4] = 'X';
  auto r = decode_envelope(wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("identifier"), std::string::npos);
  // Oversized.
  std::vector<uint8_t> huge(kMaxFrameBytes + 1);
  r = decode_envelope(huge);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);
  // Random garbage and bit flips never crash.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    auto f = good;
    f[rng() % f.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    (void)decode_envelope(f);
  }
}

TEST(Wire, RejectsOtherVersions) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto hello = wire::CreateHello(fbb, 9, fbb.CreateString("future-node"));
  wire::FinishEnvelopeBuffer(
      fbb, wire::CreateEnvelope(fbb, /*version=*/9, 3, wire::Payload::Hello, hello.Union()));
  auto r = decode_envelope({fbb.GetBufferPointer(), fbb.GetSize()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unsupported);
  EXPECT_NE(r.error().message.find("wire version 9 is not supported"), std::string::npos)
      << r.error().message;
}

TEST(Wire, EnvelopeWithoutPayloadIsRejected) {
  flatbuffers::FlatBufferBuilder fbb;
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, 1, 3));
  auto r = decode_envelope({fbb.GetBufferPointer(), fbb.GetSize()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no payload"), std::string::npos);
}

// Found by frame_fuzz: the FlatBuffers verifier passes a union member of an unknown type, so a
// frame with payload type 200 was taken for a message — and lost its payload when re-addressed.
TEST(Wire, AnUnknownPayloadTypeIsRejected) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto some_table = wire::CreateFreeBlock(fbb, 1).Union();
  wire::FinishEnvelopeBuffer(
      fbb, wire::CreateEnvelope(fbb, kWireVersion, 7, static_cast<wire::Payload>(200), some_table));
  const std::vector<uint8_t> frame(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  auto s = decode_envelope(frame);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::unsupported);
  EXPECT_NE(s.error().message.find("payload type 200"), std::string::npos) << s.error().message;
  EXPECT_FALSE(with_request_id(frame, 8).ok());
}

// Every protocol message fits in an envelope and passes the verifier; each names its kind.
TEST(Wire, EveryProtocolMessageRoundTrips) {
  using namespace wire;
  auto check = [](flatbuffers::FlatBufferBuilder& fbb, Payload type, flatbuffers::Offset<void> payload) {
    FinishEnvelopeBuffer(fbb, CreateEnvelope(fbb, 1, 77, type, payload));
    auto s = decode_envelope({fbb.GetBufferPointer(), fbb.GetSize()});
    ASSERT_TRUE(s.ok()) << EnumNamePayload(type) << ": " << s.error().to_string();
    EXPECT_EQ(s->payload_type, EnumNamePayload(type));
    EXPECT_EQ(s->request_id, 77u);
  };
  {
    flatbuffers::FlatBufferBuilder f;
    check(f, Payload::Heartbeat, CreateHeartbeat(f, f.CreateString("n1"), 123, 10, 20).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    check(f, Payload::CreateBlock, CreateCreateBlock(f, f.CreateString("thoughts"), 5).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    check(f, Payload::MergeBlocks, CreateMergeBlocks(f, 1, 2, f.CreateString("ab")).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    const std::vector<int32_t> view = {0, 1}, toks = {5, 6, 7};
    check(f, Payload::AppendTokens,
          CreateAppendTokens(f, 2, f.CreateVector(view), f.CreateVector(toks)).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    const std::vector<int32_t> view = {0}, prefill = {1};
    const auto sampling = CreateSampling(f, 0.7f, 40, 0.9f, 0.05f, 1.1f, 42);
    const auto stop = CreateStop(f, f.CreateVectorOfStrings({"\n\n"}), 0, 64, true);
    check(f, Payload::Generate,
          CreateGenerate(f, f.CreateVector(view), 3, f.CreateVector(prefill), sampling, stop).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    const std::vector<int32_t> q = {9, 10}, yes = {11}, no = {12, 13};
    const std::vector<flatbuffers::Offset<Candidate>> cands = {CreateCandidate(f, f.CreateVector(yes)),
                                                               CreateCandidate(f, f.CreateVector(no))};
    check(f, Payload::Probe, CreateProbe(f, 0, f.CreateVector(q), f.CreateVector(cands)).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    check(f, Payload::TokenEvent, CreateTokenEvent(f, 4, 3, 99, f.CreateString("Paris"), 12).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    const std::vector<float> p = {0.9f, 0.1f};
    check(f, Payload::ProbeResult, CreateProbeResult(f, 5, f.CreateVector(p), 13).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    check(f, Payload::RequestFinished, CreateRequestFinished(f, 4, 3, Finish::stop_string, 0, 14).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    check(f, Payload::PauseProgram, CreatePauseProgram(f, 8, wire::PauseMode::offload).Union());
  }
  {
    flatbuffers::FlatBufferBuilder f;
    check(f, Payload::ProgramStatus,
          CreateProgramStatus(f, 8, wire::ProgramState::paused, Phase::acting, 0, 1234).Union());
  }
}

// The codec's numbers of a ProgramStatus and a Heartbeat, linear-state slots included, come back.
TEST(Wire, StatusAndHeartbeatCarryTheirSlots) {
  auto st = decode_reply(encode_program_status(3, 8, ProgramState::active, 12, 300, true, 1, 2, 40, 3, 1));
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  EXPECT_EQ(st->kind, ReplyKind::program_status);
  EXPECT_EQ(st->pages, 12);
  EXPECT_EQ(st->wanted_pages, 40);
  EXPECT_EQ(st->slots, 3);
  EXPECT_EQ(st->wanted_slots, 1);
  auto hb = decode_reply(encode_heartbeat(4, "n1", 10, 64, 3, 4));
  ASSERT_TRUE(hb.ok()) << hb.error().to_string();
  EXPECT_EQ(hb->pages, 10);
  EXPECT_EQ(hb->pages_total, 64);
  EXPECT_EQ(hb->slots, 3);
  EXPECT_EQ(hb->slots_total, 4);
}

// Found by frame_fuzz with UB fatal: a part with no KV bytes was copied with memcpy into an empty
// vector's null pointer. It decodes to an empty part, as one with bytes decodes to its bytes.
TEST(Wire, ABlockPartWithNoKvBytesDecodes) {
  BlockPartData part;
  part.block = 7;
  part.tokens = {1, 2, 3};
  part.format = "f32";
  for (const std::vector<std::byte>& kv :
       {std::vector<std::byte>{}, std::vector<std::byte>(5, std::byte{9})}) {
    part.total = kv.size();
    auto r = decode_reply(encode_block_part(1, part, kv));
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    ASSERT_NE(r->part, nullptr);
    EXPECT_EQ(r->part->tokens, part.tokens);
    EXPECT_EQ(r->part->kv, kv);
  }
}

// Every message between a program's actors (schemas/roles.fbs) reads back as it was written.
TEST(Wire, EveryRoleMessageRoundTrips) {
  auto read = [](const Frame& f) {
    auto m = decode_role(f);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    return m.ok() ? *m : RoleMessage{};
  };
  RoleMessage m = read(encode_signal("thinker.paragraph", "First idea.\n\n"));
  EXPECT_EQ(m.kind, RoleKind::signal);
  EXPECT_EQ(m.event, "thinker.paragraph");
  EXPECT_EQ(m.text, "First idea.\n\n");
  m = read(encode_role_text("a line\n", "writer#2"));
  EXPECT_EQ(m.kind, RoleKind::text);
  EXPECT_EQ(m.text, "a line\n");
  EXPECT_EQ(m.producer, "writer#2");
  EXPECT_EQ(read(encode_feed_ended()).kind, RoleKind::feed_ended);
  m = read(encode_tokens_made(7));
  EXPECT_EQ(m.kind, RoleKind::tokens);
  EXPECT_EQ(m.count, 7);
  m = read(encode_role_failed("probe", "probe refused: no block"));
  EXPECT_EQ(m.kind, RoleKind::failed);
  EXPECT_EQ(m.actor, "probe");
  EXPECT_EQ(m.text, "probe refused: no block");
  m = read(encode_start_role({"one", "two"}));
  EXPECT_EQ(m.kind, RoleKind::start);
  EXPECT_EQ(m.names, (std::vector<std::string>{"one", "two"}));
  EXPECT_TRUE(read(encode_start_role()).names.empty());
  m = read(encode_upstream({"a"}));
  EXPECT_EQ(m.kind, RoleKind::upstream);
  EXPECT_EQ(m.names, std::vector<std::string>{"a"});
  EXPECT_EQ(read(encode_retire_role()).kind, RoleKind::retire);
  m = read(encode_retired({"queued"}));
  EXPECT_EQ(m.kind, RoleKind::retired);
  EXPECT_EQ(m.names, std::vector<std::string>{"queued"});
  m = read(encode_tool_call("add", "{\"a\": 1}", "thinker"));
  EXPECT_EQ(m.kind, RoleKind::tool_call);
  EXPECT_EQ(m.tool, "add");
  EXPECT_EQ(m.text, "{\"a\": 1}");
  EXPECT_EQ(m.actor, "thinker");
  m = read(encode_edit_program("planner", "actors: {}"));
  EXPECT_EQ(m.kind, RoleKind::edit_program);
  EXPECT_EQ(m.actor, "planner");
  EXPECT_EQ(m.text, "actors: {}");
  m = read(encode_tool_result("5555"));
  EXPECT_EQ(m.kind, RoleKind::tool_result);
  EXPECT_EQ(m.text, "5555");
  EXPECT_EQ(read(encode_sandbox_cool()).kind, RoleKind::sandbox_cool);
  EXPECT_EQ(read(encode_sandbox_warm()).kind, RoleKind::sandbox_warm);
}

// A frame of another protocol is no role message, and a role message no command: each decoder
// refuses the other's frames by name, and a corrupt one by the verifier.
TEST(Wire, RoleMessagesAndCommandsAreNotTakenForEachOther) {
  auto not_role = decode_role(encode_create_block(1, "b"));
  ASSERT_FALSE(not_role.ok());
  EXPECT_EQ(not_role.error().code, Errc::bad_format);
  EXPECT_NE(not_role.error().message.find("CreateBlock"), std::string::npos) << not_role.error().message;
  uint64_t rid = 0;
  EXPECT_FALSE(decode_command(encode_signal("e", "t"), &rid).ok());
  Frame bad = encode_signal("event", "text");
  bad[bad.size() / 2] ^= 0xff;
  bad.resize(bad.size() - 3);
  EXPECT_FALSE(decode_role(bad).ok());
}

// The hosting frames (schemas/hosting.fbs) read back as they were written; another protocol's
// frame is not one.
TEST(Wire, EveryHostingMessageRoundTrips) {
  SinkSpecData sink;
  sink.name = "log";
  sink.to = SinkSpecData::To::zmq;
  sink.endpoint = "tcp://10.0.0.2:5557";
  sink.topic = "status";
  sink.prefix = "[edge] ";
  auto m = decode_hosting(encode_host_sink(7, 99, "agent", sink));
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->kind, HostingMessage::Kind::host_sink);
  EXPECT_EQ(m->request_id, 7u);
  EXPECT_EQ(m->program, 99u);
  EXPECT_EQ(m->program_name, "agent");
  EXPECT_EQ(m->actor, "log");
  EXPECT_EQ(m->sink.to, SinkSpecData::To::zmq);
  EXPECT_EQ(m->sink.endpoint, sink.endpoint);
  EXPECT_EQ(m->sink.topic, "status");
  EXPECT_EQ(m->sink.prefix, "[edge] ");
  ToolSpecData tool;
  tool.name = "add";
  tool.command = {"python3", "-c", "print(1)"};
  tool.setup = {"true"};
  tool.timeout_s = 2.5;
  tool.max_output_bytes = 100;
  tool.max_dir_bytes = 1 << 20;
  tool.env = {"A=1"};
  tool.network = true;
  tool.read = {"/data"};
  tool.write = {"/out"};
  m = decode_hosting(encode_host_sandbox(8, 99, "agent", "sandbox", {tool}));
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->kind, HostingMessage::Kind::host_sandbox);
  ASSERT_EQ(m->tools.size(), 1u);
  EXPECT_EQ(m->tools[0].command, tool.command);
  EXPECT_EQ(m->tools[0].setup, tool.setup);
  EXPECT_EQ(m->tools[0].timeout_s, 2.5);
  EXPECT_EQ(m->tools[0].max_output_bytes, 100u);
  EXPECT_EQ(m->tools[0].env, tool.env);
  EXPECT_TRUE(m->tools[0].network);
  EXPECT_EQ(m->tools[0].read, tool.read);
  EXPECT_EQ(m->tools[0].write, tool.write);
  const Frame inner = encode_tool_call("add", "{}", "solver");
  m = decode_hosting(encode_deliver(9, 99, "sandbox", inner));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kind, HostingMessage::Kind::deliver);
  EXPECT_EQ(m->frame, inner);
  EXPECT_EQ(decode_role(m->frame)->tool, "add");
  m = decode_hosting(encode_hosted(10, 99, "log", "edge"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->node, "edge");
  m = decode_hosting(encode_unhost(11, 99, "log"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kind, HostingMessage::Kind::unhost);
  EXPECT_EQ(m->actor, "log");
  FeedSpecData feed;
  feed.from = FeedSpecData::From::zmq;
  feed.endpoint = "tcp://10.0.0.9:5601";
  feed.topic = "sensor";
  m = decode_hosting(encode_host_feed(12, 99, "agent", "imu", feed));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kind, HostingMessage::Kind::host_feed);
  EXPECT_EQ(m->actor, "imu");
  EXPECT_EQ(m->feed.from, FeedSpecData::From::zmq);
  EXPECT_EQ(m->feed.endpoint, feed.endpoint);
  EXPECT_EQ(m->feed.topic, "sensor");
  // A probe's role, and the Relay frames between it and its program.
  ProbeSpecData probe;
  probe.name = "watch";
  probe.request = encode_request(0, Request::probe({3, 4}, {7, 8}, {{1}, {2, 5}}));
  probe.question = "Line: {{event}}Level:";
  probe.fire_on = {0};
  probe.threshold = 0.4f;
  probe.edge = false;
  probe.fires = "incident";
  probe.watch = 4;
  probe.every_new_tokens = 16;
  probe.every_ms = 250;
  probe.on = {"new_line"};
  probe.after = {"ready"};
  probe.upstream = {"tail"};
  m = decode_hosting(encode_host_probe(13, 99, "agent", probe));
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->kind, HostingMessage::Kind::host_probe);
  EXPECT_EQ(m->actor, "watch");
  EXPECT_EQ(m->program_name, "agent");
  EXPECT_EQ(m->probe.request, probe.request);
  EXPECT_EQ(m->probe.question, probe.question);
  EXPECT_EQ(m->probe.fire_on, probe.fire_on);
  EXPECT_EQ(m->probe.threshold, 0.4f);
  EXPECT_FALSE(m->probe.edge);
  EXPECT_EQ(m->probe.fires, "incident");
  EXPECT_EQ(m->probe.watch, 4);
  EXPECT_EQ(m->probe.every_new_tokens, 16);
  EXPECT_EQ(m->probe.every_ms, 250);
  EXPECT_EQ(m->probe.on, probe.on);
  EXPECT_EQ(m->probe.after, probe.after);
  EXPECT_EQ(m->probe.upstream, probe.upstream);
  probe.every_ms = -1;
  EXPECT_FALSE(decode_hosting(encode_host_probe(13, 99, "agent", probe)).ok()) << "a negative period";
  for (RelayTo to : {RelayTo::role, RelayTo::engine, RelayTo::answer, RelayTo::event, RelayTo::watch}) {
    m = decode_hosting(encode_relay(14, 99, "watch", to, 21, inner, "a line\n"));
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    EXPECT_EQ(m->text, "a line\n");
    EXPECT_EQ(m->kind, HostingMessage::Kind::relay);
    EXPECT_EQ(m->to, to);
    EXPECT_EQ(m->seq, 21u);
    EXPECT_EQ(m->frame, inner);
    EXPECT_EQ(m->actor, "watch");
  }
  // A probe's filled-in question travels as text the receiver tokenizes after the question's tokens.
  uint64_t rid = 0;
  auto cmd = decode_command(encode_request(5, Request::probe({3}, {7}, {{1}}), "more"), &rid);
  ASSERT_FALSE(cmd.ok()) << "text without a tokenizer is refused";
  EXPECT_NE(cmd.error().message.find("tokenize"), std::string::npos) << cmd.error().message;
  auto other = decode_hosting(encode_signal("e", "t"));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("Signal"), std::string::npos);
}

TEST(ActorRuntime, SelfTestRepliesThroughAnActor) {
  auto r = check_actor_runtime(2);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->reply, "self-test");
  EXPECT_EQ(r->caf_version.rfind("0.17", 0), 0u);
}

}  // namespace
}  // namespace chorus

namespace chorus {
namespace {

// A generate's output constraint travels as its source text and comes back equal; a kind the
// receiver does not know is refused by name.
TEST(Wire, GenerateCarriesItsOutputConstraint) {
  SamplingParams sp;
  sp.constraint =
      OutputConstraint::json_schema_of(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  const Request r = Request::generate(3, {3}, {1, 2}, sp, StopCondition{});
  const Frame f = encode_request(9, r);
  uint64_t rid = 0;
  auto cmd = decode_command(f, &rid);
  ASSERT_TRUE(cmd.ok()) << cmd.error().to_string();
  const auto* back = std::get_if<Request>(&*cmd);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->sampling.constraint, sp.constraint);

  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<int32_t> view = {3}, prefill = {1};
  const auto sampling = wire::CreateSampling(fbb, 0.7f, 40, 0.9f, 0.05f, 1.0f, 0, 0, 7);
  wire::FinishEnvelopeBuffer(
      fbb, wire::CreateEnvelope(
               fbb, 1, 5, wire::Payload::Generate,
               wire::CreateGenerate(fbb, fbb.CreateVector(view), 3, fbb.CreateVector(prefill), sampling, 0)
                   .Union()));
  auto bad = decode_command({fbb.GetBufferPointer(), fbb.GetSize()}, &rid);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("constraint_kind 7 is unknown"), std::string::npos)
      << bad.error().message;
}

}  // namespace
}  // namespace chorus
