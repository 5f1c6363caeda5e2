// Small text helpers every layer uses.
#pragma once

#include <string_view>

namespace chorus {

// `s` without the leading and trailing characters found in `chars` (spaces, tabs, CR, LF by default).
inline std::string_view trim(std::string_view s, std::string_view chars = " \t\r\n") {
  const size_t b = s.find_first_not_of(chars);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(chars) - b + 1);
}

}  // namespace chorus
