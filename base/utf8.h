// UTF-8 encoding, for the layers that write text from code points (the tokenizer's byte
// alphabet, the Jinja interpreter's string escapes).
#pragma once

#include <cstdint>
#include <string>

namespace chorus {

// Appends the UTF-8 encoding of `cp` (any value <= 0x10FFFF, surrogates included).
void append_utf8(std::string& out, uint32_t cp);

}  // namespace chorus
