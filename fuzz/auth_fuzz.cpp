// libFuzzer target for the API-key check of `chorus serve` (gateway/auth.h): any Authorization
// header either yields a token that lies inside it, non-empty and without surrounding spaces, or
// none; a token is allowed exactly when it equals one of the keys. Input: the header, then after
// the first newline the keys, one per line. Run under ASan+UBSan.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gateway/auth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  const std::string header = in.substr(0, nl);
  std::vector<std::string> keys;
  for (size_t at = nl; at != std::string::npos && at < in.size();) {
    const size_t next = in.find('\n', at + 1);
    keys.push_back(in.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }
  const auto token = chorus::bearer_token(header);
  if (token) {
    if (token->empty() || token->data() < header.data() ||
        token->data() + token->size() > header.data() + header.size())
      __builtin_trap();
    if (token->front() == ' ' || token->back() == ' ') __builtin_trap();
  }
  const std::string presented = token ? std::string(*token) : header;
  bool equal = false;
  for (const std::string& k : keys) equal |= k == presented;
  if (chorus::key_allowed(presented, keys) != equal) __builtin_trap();
  return 0;
}
