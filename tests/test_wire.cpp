// Envelopes: round trip, and every malformed frame rejected with a reason. Also the actor
// runtime self-test (CAF spawns, replies through FlatBuffers).
#include <gtest/gtest.h>

#include <random>

#include "actors/runtime_check.h"
#include "actors/wire.h"
#include "schemas/common_generated.h"

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
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, /*version=*/9, 3, wire::Payload::Hello, hello.Union()));
  auto r = decode_envelope({fbb.GetBufferPointer(), fbb.GetSize()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unsupported);
  EXPECT_NE(r.error().message.find("wire version 9 is not supported"), std::string::npos) << r.error().message;
}

TEST(Wire, EnvelopeWithoutPayloadIsRejected) {
  flatbuffers::FlatBufferBuilder fbb;
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, 1, 3));
  auto r = decode_envelope({fbb.GetBufferPointer(), fbb.GetSize()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no payload"), std::string::npos);
}

TEST(ActorRuntime, SelfTestRepliesThroughAnActor) {
  auto r = check_actor_runtime(2);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->reply, "self-test");
  EXPECT_EQ(r->caf_version.rfind("0.17", 0), 0u);
}

}  // namespace
}  // namespace chorus
