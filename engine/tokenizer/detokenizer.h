// Streaming detokenizer: turns tokens into text as they are generated without ever emitting
// half a UTF-8 character. A multi-byte character split across tokens is held back until its
// last byte arrives; bytes that can never form a valid character are emitted as they are.
#pragma once

#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace chorus {

class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, DecodeOptions opts = {})
      : tokenizer_(tokenizer), opts_(opts) {}

  // Appends the token's bytes and returns the text that is now complete (may be empty).
  std::string push(TokenId id);
  // Returns whatever is held back (an incomplete sequence at the end of the stream).
  std::string flush();

  // Splits `bytes` into the longest prefix that does not end inside an incomplete UTF-8
  // sequence (returned) and the incomplete tail (left in `bytes`). Exposed for tests.
  static std::string take_complete(std::string& bytes);

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions opts_;
  std::string pending_;  // at most 3 bytes: the start of a character not yet complete
};

}  // namespace chorus
