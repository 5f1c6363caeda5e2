// Python's str methods as chat templates call them (strip, split, replace, title, ...), on
// UTF-8 strings. Case changes and character classes are ASCII-only; other bytes are kept.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::jinja {

inline constexpr std::string_view kWhitespace = " \t\n\r\x0b\x0c";

std::string strip(const std::string& s, std::string_view chars, bool left, bool right);
// sep == nullptr: runs of whitespace, empty parts dropped. max < 0: no limit.
std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t max, bool from_right);
std::vector<std::string> split_lines(const std::string& s);
// how: "upper", "lower", "title", "capitalize".
std::string change_case(const std::string& s, std::string_view how);
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
int64_t count(const std::string& s, const std::string& sub);
// The code-point index of byte offset `at`.
int64_t char_index(const std::string& s, size_t at);
// how: "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower".
bool char_class(const std::string& s, std::string_view how);

}  // namespace chorus::jinja
