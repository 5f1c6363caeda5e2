#include "engine/template/jinja_strings.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "engine/template/jinja_value.h"

namespace chorus::jinja {

std::string strip(const std::string& s, std::string_view chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && chars.find(s[b]) != std::string_view::npos) ++b;
  if (right)
    while (e > b && chars.find(s[e - 1]) != std::string_view::npos) --e;
  return s.substr(b, e - b);
}

namespace {

bool is_ws(char c) {
  return kWhitespace.find(c) != std::string_view::npos;
}

std::vector<std::string> split_ws(const std::string& s, int64_t max, bool from_right) {
  std::vector<std::string> out;
  if (!from_right) {
    size_t k = 0;
    while (true) {
      while (k < s.size() && is_ws(s[k])) ++k;
      if (k >= s.size()) break;
      if (max >= 0 && static_cast<int64_t>(out.size()) == max) {
        out.push_back(strip(s.substr(k), kWhitespace, false, true));
        break;
      }
      size_t e = k;
      while (e < s.size() && !is_ws(s[e])) ++e;
      out.push_back(s.substr(k, e - k));
      k = e;
    }
    return out;
  }
  size_t k = s.size();
  while (true) {
    while (k > 0 && is_ws(s[k - 1])) --k;
    if (k == 0) break;
    if (max >= 0 && static_cast<int64_t>(out.size()) == max) {
      out.push_back(strip(s.substr(0, k), kWhitespace, true, false));
      break;
    }
    size_t b = k;
    while (b > 0 && !is_ws(s[b - 1])) --b;
    out.push_back(s.substr(b, k - b));
    k = b;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t max, bool from_right) {
  if (sep == nullptr) return split_ws(s, max, from_right);
  if (sep->empty()) throw TemplateError("empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    size_t k = 0;
    while (max < 0 || static_cast<int64_t>(out.size()) < max) {
      const size_t at = s.find(*sep, k);
      if (at == std::string::npos) break;
      out.push_back(s.substr(k, at - k));
      k = at + sep->size();
    }
    out.push_back(s.substr(k));
    return out;
  }
  size_t end = s.size();
  while (max < 0 || static_cast<int64_t>(out.size()) < max) {
    if (end < sep->size()) break;
    const size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string::npos) break;
    out.push_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t k = 0;
  while (k < s.size()) {
    size_t e = k;
    while (e < s.size() && s[e] != '\n' && s[e] != '\r') ++e;
    out.push_back(s.substr(k, e - k));
    if (e < s.size() && s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ++e;
    k = e + 1;
  }
  return out;
}

std::string change_case(const std::string& s, std::string_view how) {
  std::string out = s;
  bool word_start = true;
  for (size_t k = 0; k < out.size(); ++k) {
    const auto c = static_cast<unsigned char>(out[k]);
    if (how == "upper") {
      out[k] = static_cast<char>(std::toupper(c));
    } else if (how == "lower") {
      out[k] = static_cast<char>(std::tolower(c));
    } else if (how == "capitalize") {
      out[k] = static_cast<char>(k == 0 ? std::toupper(c) : std::tolower(c));
    } else {  // title: a letter after a non-letter starts a word
      const bool alpha = std::isalpha(c) != 0;
      out[k] = static_cast<char>(alpha ? (word_start ? std::toupper(c) : std::tolower(c)) : c);
      word_start = !alpha && c < 0x80;
    }
  }
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t k = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` between characters
    for (std::string_view c : code_points(s)) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    const size_t at = s.find(from, k);
    if (at == std::string::npos) break;
    out.append(s, k, at - k);
    out += to;
    k = at + from.size();
    ++done;
  }
  out.append(s, k);
  return out;
}

int64_t count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(code_points(s).size()) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

int64_t char_index(const std::string& s, size_t at) {
  int64_t n = 0;
  for (size_t k = 0; k < at && k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) ++n;
  return n;
}

bool char_class(const std::string& s, std::string_view how) {
  if (s.empty()) return false;
  bool cased = false;
  for (unsigned char c : s) {
    if (how == "isdigit" && !std::isdigit(c)) return false;
    if (how == "isalpha" && !std::isalpha(c)) return false;
    if (how == "isalnum" && !std::isalnum(c)) return false;
    if (how == "isspace" && !std::isspace(c)) return false;
    if (how == "isupper" && std::islower(c)) return false;
    if (how == "islower" && std::isupper(c)) return false;
    cased = cased || std::isalpha(c);
  }
  return how == "isupper" || how == "islower" ? cased : true;
}

}  // namespace chorus::jinja
