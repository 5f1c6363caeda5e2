#include "engine/tokenizer/unicode.h"

#include <array>

namespace chorus::unicode {

int utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC0) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 0;
}

std::vector<uint32_t> decode_utf8_lossy(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const int len = utf8_sequence_length(p[i]);
    bool ok = len > 0 && i + static_cast<size_t>(len) <= n;
    uint32_t cp = 0;
    if (ok) {
      static constexpr uint32_t lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
      cp = p[i] & lead_mask[len];
      for (int k = 1; k < len; ++k) {
        if ((p[i + k] & 0xC0) != 0x80) {
          ok = false;
          break;
        }
        cp = (cp << 6) | (p[i + k] & 0x3F);
      }
      if (cp > 0x10FFFF) ok = false;
    }
    if (!ok) {
      out.push_back(kReplacement);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

namespace {

struct ByteAlphabet {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // code points 0..323 cover the whole alphabet

  ByteAlphabet() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = self ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) {
  return alphabet().to_cp[b];
}

int codepoint_to_byte(uint32_t cp) {
  return cp < alphabet().to_byte.size() ? alphabet().to_byte[cp] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_to_codepoint(b));
  return out;
}

bool byte_level_decode(std::string_view text, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const int len = utf8_sequence_length(p[i]);
    if (len == 0 || i + static_cast<size_t>(len) > text.size()) return false;
    uint32_t cp = len == 1 ? p[i] : (p[i] & (0xFF >> (len + 1)));
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
    const int b = codepoint_to_byte(cp);
    if (b < 0) return false;
    *out += static_cast<char>(b);
    i += static_cast<size_t>(len);
  }
  return true;
}

}  // namespace chorus::unicode
