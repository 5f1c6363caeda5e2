// Reading FlatBuffers fields into plain values: an absent string is "", an absent list empty.
// Only net/'s decoders include this.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <string>
#include <vector>

namespace chorus {

inline std::string fb_str(const flatbuffers::String* s) {
  return s ? s->str() : std::string();
}

inline std::vector<std::string> fb_strs(
    const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v)
    for (const auto* s : *v) out.push_back(fb_str(s));
  return out;
}

}  // namespace chorus
