// Reading YAML with errors that say where: file:line:column, the key path, what was expected.
// Internal to the topology reader: only topology/topology.cpp includes it, so yaml-cpp stays out of
// the public headers.
#pragma once

#include <yaml-cpp/yaml.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus::topology::detail {

struct LoadError {
  Error error;
};

inline std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

// Where the first byte that is not UTF-8 is, as "line:column" (1-based), or "" when all is.
inline std::string first_bad_utf8(const std::string& s) {
  int line = 1, col = 1;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && n == 2) ok = c >= 0xC2;  // no overlong forms
    if (ok && n == 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
    }
    if (ok && n == 4) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90) && c <= 0xF4;
    }
    if (!ok) return std::to_string(line) + ":" + std::to_string(col);
    if (c == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    i += n;
  }
  return "";
}

class Reader {
 public:
  Reader(std::string file, std::set<std::string> overridden)
      : file_(std::move(file)), set_(std::move(overridden)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& path, const std::string& what,
                         Errc code = Errc::bad_format) const {
    throw LoadError{make_error(code, where(at, path) + ": " + path + ": " + what)};
  }

  std::string where(const YAML::Node& at, const std::string& path) const {
    for (const auto& s : set_)
      if (path == s || path.rfind(s + ".", 0) == 0 || path.rfind(s + "[", 0) == 0)
        return file_ + ": --set " + s;
    const YAML::Mark m = at.Mark();
    if (m.is_null()) return file_;
    return file_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }

  void map(const YAML::Node& n, const std::string& path) const {
    if (!n.IsMap()) fail(n, path, "expected a mapping (key: value lines), found " + shape(n));
  }

  // Every key of `n` must be one of `known`.
  void keys(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known) const {
    map(n, path);
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (!it->first.IsScalar()) fail(it->first, path, "a key must be a plain name");
      const std::string k = it->first.Scalar();
      if (std::find(known.begin(), known.end(), k) == known.end())
        fail(it->first, path + "." + k, "unknown key (valid here: " + join(known) + ")");
    }
  }

  std::string str(const YAML::Node& n, const std::string& path) const {
    if (!n.IsScalar()) fail(n, path, "expected a string, found " + shape(n));
    return n.Scalar();
  }

  std::string name(const YAML::Node& n, const std::string& path) const {
    const std::string s = str(n, path);
    const bool ok = !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
    if (!ok) fail(n, path, "\"" + clip(s) + "\" is not a name (letters, digits, _ - and ., at most 64)");
    return s;
  }

  int64_t integer(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi) const {
    const std::string s = str(n, path);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used, 10);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size()) fail(n, path, "expected an integer, found \"" + clip(s) + "\"");
    if (v < lo || v > hi)
      fail(n, path,
           std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }

  double number(const YAML::Node& n, const std::string& path, double lo, double hi) const {
    const std::string s = str(n, path);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() || !std::isfinite(v))
      fail(n, path, "expected a number, found \"" + clip(s) + "\"");
    if (v < lo || v > hi) fail(n, path, s + " is out of range [" + fmt(lo) + ", " + fmt(hi) + "]");
    return v;
  }

  bool boolean(const YAML::Node& n, const std::string& path) const {
    const std::string s = str(n, path);
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
    fail(n, path, "expected true or false, found \"" + clip(s) + "\"");
  }

  // A string or a list of strings.
  std::vector<std::string> strings(const YAML::Node& n, const std::string& path, size_t max = 256) const {
    return list(n, path, max, "a string or a list of strings", &Reader::str);
  }

  std::vector<std::string> names(const YAML::Node& n, const std::string& path, size_t max = 256) const {
    return list(n, path, max, "a name or a list of names", &Reader::name);
  }

  // One value, or a list of them, each read by `one`.
  std::vector<std::string> list(const YAML::Node& n, const std::string& path, size_t max, const char* what,
                                std::string (Reader::*one)(const YAML::Node&, const std::string&)
                                    const) const {
    if (!n.IsScalar() && !n.IsSequence())
      fail(n, path, std::string("expected ") + what + ", found " + shape(n));
    if (n.IsSequence() && n.size() > max) fail(n, path, "more than " + std::to_string(max) + " entries");
    std::vector<std::string> out;
    for (size_t i = 0; i < (n.IsScalar() ? 1 : n.size()); ++i)
      out.push_back((this->*one)(item(n, i), item_path(n, path, i)));
    return out;
  }

  // Entry i of a value that is a list, or the value itself when it is one scalar (strings(),
  // names() accept both), and its key path.
  static YAML::Node item(const YAML::Node& n, size_t i) { return n.IsSequence() ? n[i] : n; }
  static std::string item_path(const YAML::Node& n, const std::string& path, size_t i) {
    return n.IsSequence() ? path + "[" + std::to_string(i) + "]" : path;
  }

  static std::string shape(const YAML::Node& n) {
    if (n.IsMap()) return "a mapping";
    if (n.IsSequence()) return "a list";
    if (n.IsNull()) return "nothing";
    return "\"" + clip(n.Scalar()) + "\"";
  }

  static std::string clip(const std::string& s) { return s.size() <= 40 ? s : s.substr(0, 37) + "..."; }
  static std::string fmt(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  }

 private:
  std::string file_;
  std::set<std::string> set_;
};

}  // namespace chorus::topology::detail
