#include "engine/tokenizer/detokenizer.h"

#include "engine/tokenizer/unicode.h"

namespace chorus {

std::string IncrementalDecoder::take_complete(std::string& bytes) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = bytes.size();
  size_t cut = n;
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    const int len = unicode::utf8_sequence_length(c);
    if (len > static_cast<int>(back)) {
      // Hold the tail only if every byte after the lead is a continuation (it can complete).
      bool can_complete = true;
      for (size_t k = n - back + 1; k < n; ++k)
        if ((static_cast<unsigned char>(bytes[k]) & 0xC0) != 0x80) can_complete = false;
      if (can_complete) cut = n - back;
    }
    break;
  }
  std::string done = bytes.substr(0, cut);
  bytes.erase(0, cut);
  return done;
}

std::string IncrementalDecoder::push(TokenId id) {
  pending_ += tokenizer_.token_to_piece(id, opts_);
  return take_complete(pending_);
}

std::string IncrementalDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace chorus
