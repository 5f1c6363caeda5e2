#include "gateway/auth.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "base/text.h"

namespace chorus {
namespace {

// A header's or a key file line's blanks: spaces, tabs and a CR (a line's LF is already gone).
std::string_view trim_blanks(std::string_view s) {
  return trim(s, " \t\r");
}

// Time depends on the lengths only: every byte of the longer one is visited.
bool same(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

std::optional<std::string_view> bearer_token(std::string_view header) {
  header = trim_blanks(header);
  constexpr std::string_view scheme = "bearer";
  if (header.size() <= scheme.size() || (header[scheme.size()] != ' ' && header[scheme.size()] != '\t'))
    return std::nullopt;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (static_cast<char>(std::tolower(static_cast<unsigned char>(header[i]))) != scheme[i])
      return std::nullopt;
  const std::string_view key = trim_blanks(header.substr(scheme.size()));
  if (key.empty()) return std::nullopt;
  return key;
}

bool key_allowed(std::string_view presented, const std::vector<std::string>& keys) {
  bool ok = false;
  for (const std::string& k : keys) ok |= same(presented, k);  // no early exit: every key is compared
  return ok;
}

Result<std::vector<std::string>> read_key_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return make_error(Errc::io, "cannot read the API key file " + path);
  std::vector<std::string> keys;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    const std::string_view k = trim_blanks(line);
    if (k.empty() || k.front() == '#') continue;
    for (char c : k)
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
        return make_error(Errc::bad_format,
                          path + ":" + std::to_string(n) +
                              ": a key is one word of printable characters (no spaces inside)");
    keys.emplace_back(k);
  }
  if (f.bad()) return make_error(Errc::io, "reading the API key file " + path + " failed");
  if (keys.empty())
    return make_error(Errc::bad_format, path + ": no API key in it (one per line; # starts a comment)");
  return keys;
}

}  // namespace chorus
