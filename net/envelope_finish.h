// Closing a frame: the payload wrapped in an envelope (schemas/envelope.fbs), the buffer finished
// with its file identifier, and its bytes copied out. Only net/'s encoders include this.
#pragma once

#include <cstdint>
#include <vector>

#include "net/wire.h"
#include "schemas/envelope_generated.h"

namespace chorus {

inline std::vector<uint8_t> finish_envelope(flatbuffers::FlatBufferBuilder& fbb, uint64_t request_id,
                                            wire::Payload type, flatbuffers::Offset<void> payload) {
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, kWireVersion, request_id, type, payload));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

}  // namespace chorus
