// UTF-8 and the GPT-2 byte-level alphabet, as the tokenizer needs them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/utf8.h"

namespace chorus::unicode {

constexpr uint32_t kReplacement = 0xFFFD;

// Decodes UTF-8 the way llama.cpp's tokenizer does, so token ids match it byte for byte:
// a stray continuation byte, a truncated or badly continued sequence, a lead byte F8-FF, or
// a value above U+10FFFF becomes one U+FFFD and decoding resumes at the next byte; overlong
// forms and surrogates are accepted as the values they encode.
std::vector<uint32_t> decode_utf8_lossy(std::string_view s);

using chorus::append_utf8;  // base/utf8.h

// Length of the UTF-8 sequence that `lead` starts (1-4), or 0 for a continuation byte or an
// invalid lead byte.
int utf8_sequence_length(unsigned char lead);

// GPT-2 byte-level alphabet: each byte maps to one printable code point (bytes 0x21-0x7E,
// 0xA1-0xAC, 0xAE-0xFF map to themselves; the other 68 to U+0100.. in increasing order).
uint32_t byte_to_codepoint(uint8_t b);
// Inverse of byte_to_codepoint; returns -1 for a code point outside the alphabet.
int codepoint_to_byte(uint32_t cp);

// Encodes each byte of `bytes` as its byte-level code point, in UTF-8.
std::string byte_level_encode(std::string_view bytes);
// Decodes a byte-level string back to bytes. Returns false if a code point is outside the
// alphabet (then `out` holds what decoded before it).
bool byte_level_decode(std::string_view text, std::string* out);

}  // namespace chorus::unicode
