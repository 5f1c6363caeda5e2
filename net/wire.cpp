#include "net/wire.h"

#include <chrono>

#include "net/envelope_finish.h"

namespace chorus {
std::vector<uint8_t> encode_error_envelope(uint64_t request_id, const Error& error) {
  flatbuffers::FlatBufferBuilder fbb(256);
  const auto msg = fbb.CreateString(error.message);
  const auto err = wire::CreateError(fbb, static_cast<wire::ErrorCode>(error.code), msg);
  return finish_envelope(fbb, request_id, wire::Payload::Error, err.Union());
}

std::vector<uint8_t> encode_hello_envelope(uint64_t request_id, const std::string& node_id) {
  flatbuffers::FlatBufferBuilder fbb(256);
  const auto id = fbb.CreateString(node_id);
  const auto ver = fbb.CreateString(CHORUS_VERSION_STRING);
  const auto hello = wire::CreateHello(fbb, kWireVersion, id, ver);
  return finish_envelope(fbb, request_id, wire::Payload::Hello, hello.Union());
}

std::vector<uint8_t> encode_watch_programs(uint64_t request_id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return finish_envelope(fbb, request_id, wire::Payload::WatchPrograms,
                         wire::CreateWatchPrograms(fbb).Union());
}

std::vector<uint8_t> encode_program_waiting(uint64_t program) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return finish_envelope(fbb, 0, wire::Payload::ProgramWaiting,
                         wire::CreateProgramWaiting(fbb, program).Union());
}

std::vector<uint8_t> encode_watch_block(uint64_t request_id, int32_t block) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return finish_envelope(fbb, request_id, wire::Payload::WatchBlock,
                         wire::CreateWatchBlock(fbb, block).Union());
}

std::vector<uint8_t> encode_block_grown(int32_t block, int64_t cached) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return finish_envelope(fbb, 0, wire::Payload::BlockGrown,
                         wire::CreateBlockGrown(fbb, block, cached).Union());
}

Result<int32_t> decode_watch_block(std::span<const uint8_t> frame) {
  auto summary = decode_envelope(frame);
  if (!summary) return summary.error();
  const auto* w = wire::GetEnvelope(frame.data())->payload_as_WatchBlock();
  if (w == nullptr) return make_error(Errc::bad_format, "not a WatchBlock frame: " + summary->payload_type);
  return w->block();
}

Result<EnvelopeSummary> decode_envelope(std::span<const uint8_t> frame) {
  if (frame.size() > kMaxFrameBytes)
    return make_error(Errc::out_of_range, "frame of " + std::to_string(frame.size()) +
                                              " bytes exceeds the limit of " +
                                              std::to_string(kMaxFrameBytes));
  if (frame.size() < 8)
    return make_error(Errc::bad_format, "frame of " + std::to_string(frame.size()) + " bytes is too short");
  if (!wire::EnvelopeBufferHasIdentifier(frame.data()))
    return make_error(Errc::bad_format, "frame does not carry the chorus identifier 'CHR1'");
  flatbuffers::Verifier verifier(frame.data(), frame.size(), /*max_depth=*/16, /*max_tables=*/10000);
  if (!wire::VerifyEnvelopeBuffer(verifier))
    return make_error(Errc::bad_format, "frame failed FlatBuffers verification");
  const wire::Envelope* env = wire::GetEnvelope(frame.data());
  if (env->version() != kWireVersion)
    return make_error(Errc::unsupported, "wire version " + std::to_string(env->version()) +
                                             " is not supported (this node speaks " +
                                             std::to_string(kWireVersion) + ")");
  EnvelopeSummary s;
  s.version = env->version();
  s.request_id = env->request_id();
  s.payload_type = wire::EnumNamePayload(env->payload_type());
  if (env->payload_type() == wire::Payload::NONE || env->payload() == nullptr)
    return make_error(Errc::bad_format, "envelope has no payload");
  // The verifier lets a union member of an unknown type through (forward compatibility); no
  // reader here could use it.
  if (env->payload_type() > wire::Payload::MAX)
    return make_error(Errc::unsupported, "payload type " +
                                             std::to_string(static_cast<int>(env->payload_type())) +
                                             " is not one this node knows");
  if (const auto* e = env->payload_as_Error())
    s.text = e->message() ? e->message()->str() : "";
  else if (const auto* h = env->payload_as_Hello())
    s.text = h->node_id() ? h->node_id()->str() : "";
  return s;
}

Result<std::vector<uint8_t>> with_request_id(std::span<const uint8_t> frame, uint64_t request_id) {
  auto summary = decode_envelope(frame);
  if (!summary) return summary.error();
  return readdressed(frame, request_id);
}

int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<uint8_t> readdressed(std::span<const uint8_t> frame, uint64_t request_id) {
  wire::EnvelopeT env;
  wire::GetEnvelope(frame.data())->UnPackTo(&env);
  env.request_id = request_id;
  flatbuffers::FlatBufferBuilder fbb(frame.size() + 64);
  wire::FinishEnvelopeBuffer(fbb, wire::Envelope::Pack(fbb, &env));
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

}  // namespace chorus
