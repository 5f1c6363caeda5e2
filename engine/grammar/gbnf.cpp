#include "engine/grammar/gbnf.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/utf8.h"

namespace chorus {
namespace {

using B = GrammarBuilder;
using Seq = GrammarBuilder::Seq;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Code point intervals [lo, hi], sorted and disjoint once normalised.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalised(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

// Every code point but those of `r` (normalised) and the surrogates.
Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

std::array<uint8_t, 4> encode(uint32_t cp, int& n) {
  std::string s;
  append_utf8(s, cp);
  n = static_cast<int>(s.size());
  std::array<uint8_t, 4> b{};
  for (int i = 0; i < n; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(s[static_cast<size_t>(i)]);
  return b;
}

// The byte sequences spelling the code points whose UTF-8 forms (all n bytes long) lie between
// lo and hi: UTF-8 orders like its code points, so the range splits by leading bytes.
void spell(const std::array<uint8_t, 4>& lo, const std::array<uint8_t, 4>& hi, int i, int n, Seq prefix,
           std::vector<Seq>& out) {
  if (i == n - 1) {
    prefix.push_back(B::bytes(B::range(lo[i], hi[i])));
    out.push_back(std::move(prefix));
    return;
  }
  if (lo[i] == hi[i]) {
    prefix.push_back(B::byte(lo[i]));
    spell(lo, hi, i + 1, n, std::move(prefix), out);
    return;
  }
  bool lo_min = true, hi_max = true;
  for (int k = i + 1; k < n; ++k) {
    lo_min = lo_min && lo[k] == 0x80;
    hi_max = hi_max && hi[k] == 0xBF;
  }
  auto full_tail = [&](Seq s) {
    for (int k = i + 1; k < n; ++k) s.push_back(B::bytes(B::range(0x80, 0xBF)));
    return s;
  };
  if (lo_min && hi_max) {
    Seq s = prefix;
    s.push_back(B::bytes(B::range(lo[i], hi[i])));
    out.push_back(full_tail(std::move(s)));
    return;
  }
  std::array<uint8_t, 4> top = lo, bottom = hi;  // lo's lead with the largest tail; hi's with the smallest
  for (int k = i + 1; k < n; ++k) {
    top[k] = 0xBF;
    bottom[k] = 0x80;
  }
  uint8_t mid_lo = lo[i], mid_hi = hi[i];
  if (!lo_min) {
    spell(lo, top, i, n, prefix, out);
    ++mid_lo;
  }
  if (!hi_max) --mid_hi;
  if (mid_lo <= mid_hi) {
    Seq s = prefix;
    s.push_back(B::bytes(B::range(mid_lo, mid_hi)));
    out.push_back(full_tail(std::move(s)));
  }
  if (!hi_max) spell(bottom, hi, i, n, prefix, out);
}

// The alternatives spelling any one code point of `ranges` (normalised).
std::vector<Seq> spell_ranges(const Ranges& ranges) {
  static constexpr std::pair<uint32_t, uint32_t> kByLength[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, kMaxCodePoint}};
  std::vector<Seq> out;
  for (const auto& [lo, hi] : ranges)
    for (const auto& [blo, bhi] : kByLength) {
      const uint32_t a = std::max(lo, blo), z = std::min(hi, bhi);
      if (a > z) continue;
      int n = 0, m = 0;
      const auto la = encode(a, n), lz = encode(z, m);
      spell(la, lz, 0, n, {}, out);
    }
  return out;
}

// A parse error, caught at gbnf_grammar.
struct GbnfError {
  std::string message;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}

  Result<Grammar> run() {
    try {
      skip();
      while (p_ < t_.size()) rule();
      auto root = rules_.find("root");
      if (root == rules_.end() || !defined_.count("root"))
        fail("there is no `root` rule (where the output starts)");
      for (const auto& [name, id] : rules_)
        if (!defined_.count(name))
          fail_at(used_at_.at(name), "rule `" + name + "` is used but never defined");
      return b_.build(root->second);
    } catch (const GbnfError& e) {
      return make_error(Errc::invalid_argument, e.message);
    }
  }

 private:
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < t_.size(); ++i) {
      col = t_[i] == '\n' ? 1 : col + 1;
      line += t_[i] == '\n';
    }
    throw GbnfError{"GBNF line " + std::to_string(line) + " column " + std::to_string(col) + ": " + what};
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(p_, what); }

  bool at_end() const { return p_ >= t_.size(); }
  char peek(size_t k = 0) const { return p_ + k < t_.size() ? t_[p_ + k] : '\0'; }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  // Spaces, newlines and # comments.
  void skip() {
    while (!at_end()) {
      if (peek() == '#') {
        while (!at_end() && peek() != '\n') ++p_;
      } else if (peek() == ' ' || peek() == '\t' || peek() == '\r' || peek() == '\n') {
        ++p_;
      } else {
        return;
      }
    }
  }

  std::string name() {
    const size_t from = p_;
    while (!at_end() && name_char(peek())) ++p_;
    if (p_ == from) fail("a rule name (letters, digits, - or _) is expected here");
    return std::string(t_.substr(from, p_ - from));
  }

  // Whether a rule's definition (`name ::=`) starts here.
  bool rule_starts() const {
    size_t q = p_;
    while (q < t_.size() && name_char(t_[q])) ++q;
    if (q == p_) return false;
    while (q < t_.size() && (t_[q] == ' ' || t_[q] == '\t')) ++q;
    return t_.substr(q, 3) == "::=";
  }

  int32_t rule_id(const std::string& n, size_t at) {
    auto it = rules_.find(n);
    if (it != rules_.end()) return it->second;
    used_at_[n] = at;
    return rules_[n] = b_.declare(n);
  }

  void rule() {
    const size_t at = p_;
    const std::string n = name();
    skip();
    if (t_.substr(p_, 3) != "::=") fail("`::=` is expected after the rule name `" + n + "`");
    p_ += 3;
    if (defined_.count(n)) fail_at(at, "rule `" + n + "` is defined twice");
    const int32_t id = rule_id(n, at);
    defined_.insert(n);
    b_.define(id, alternatives(false));
  }

  std::vector<Seq> alternatives(bool nested) {
    std::vector<Seq> alts;
    alts.push_back(sequence(nested));
    while (peek() == '|') {
      ++p_;
      alts.push_back(sequence(nested));
    }
    return alts;
  }

  Seq sequence(bool nested) {
    Seq s;
    for (;;) {
      skip();
      if (at_end() || peek() == '|' || peek() == ')') break;
      if (!nested && rule_starts()) break;
      const Seq item = postfix(primary());
      s.insert(s.end(), item.begin(), item.end());
    }
    if (!nested && peek() == ')') fail("`)` without its `(`");
    return s;
  }

  Seq primary() {
    const size_t at = p_;
    const char c = peek();
    if (c == '"') return literal();
    if (c == '[') return {B::ref(b_.add(anon("class"), spell_ranges(char_class())))};
    if (c == '.') {
      ++p_;
      return {B::ref(any_char())};
    }
    if (c == '(') {
      ++p_;
      std::vector<Seq> alts = alternatives(true);
      skip();
      if (peek() != ')') fail_at(at, "this `(` is never closed");
      ++p_;
      return {B::ref(b_.add(anon("group"), std::move(alts)))};
    }
    if (name_char(c)) return {B::ref(rule_id(name(), at))};
    fail(std::string("unexpected `") + c + "`");
  }

  Seq postfix(Seq item) {
    for (;;) {
      const char c = peek();
      int64_t lo = 0, hi = -1;
      if (c == '*') {
        ++p_;
      } else if (c == '+') {
        ++p_;
        lo = 1;
      } else if (c == '?') {
        ++p_;
        hi = 1;
      } else if (c == '{') {
        const size_t at = p_++;
        lo = number(at);
        hi = lo;
        if (peek() == ',') {
          ++p_;
          skip();
          hi = peek() == '}' ? -1 : number(at);
        }
        skip();
        if (peek() != '}') fail_at(at, "a repetition is {m}, {m,} or {m,n}");
        ++p_;
        if (hi >= 0 && hi < lo) fail_at(at, "a repetition {m,n} needs m <= n");
        if (lo > kMaxGbnfRepeat || hi > kMaxGbnfRepeat)
          fail_at(at, "a repetition of more than " + std::to_string(kMaxGbnfRepeat) + " copies");
      } else {
        return item;
      }
      item = {B::ref(b_.repeat(anon("repeat"), item, lo, hi))};
    }
  }

  int64_t number(size_t at) {
    skip();
    int64_t v = 0;
    const size_t from = p_;
    while (!at_end() && peek() >= '0' && peek() <= '9' && v <= kMaxGbnfRepeat) v = v * 10 + (t_[p_++] - '0');
    if (p_ == from) fail_at(at, "a repetition is {m}, {m,} or {m,n}");
    skip();
    return v;
  }

  // One character of a literal or a class: its code point (escapes read).
  uint32_t character() {
    if (at_end()) fail("the text ends inside a literal or a class");
    const auto c = static_cast<unsigned char>(peek());
    if (c == '\\') {
      ++p_;
      const char e = peek();
      ++p_;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^': return static_cast<uint32_t>(e);
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: fail(std::string("unknown escape `\\") + e + "`");
      }
    }
    // A UTF-8 character as it is written.
    const int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || p_ + static_cast<size_t>(n) > t_.size()) fail("the text is not UTF-8 here");
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(t_[p_ + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) fail("the text is not UTF-8 here");
      cp = (cp << 6) | (cc & 0x3F);
    }
    p_ += static_cast<size_t>(n);
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char h = peek();
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) fail("an escape wants " + std::to_string(digits) + " hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++p_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) fail("an escape names no Unicode character");
    return v;
  }

  Seq literal() {
    const size_t at = p_++;
    std::string bytes;
    while (peek() != '"') {
      if (at_end()) fail_at(at, "this literal is never closed");
      append_utf8(bytes, character());
    }
    ++p_;
    return B::literal(bytes);
  }

  Ranges char_class() {
    const size_t at = p_++;
    const bool negated = peek() == '^';
    if (negated) ++p_;
    Ranges r;
    while (peek() != ']') {
      if (at_end()) fail_at(at, "this class is never closed");
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']') {
        ++p_;
        if (at_end()) fail_at(at, "this class is never closed");
        hi = character();
        if (hi < lo) fail_at(at, "a range in this class runs backwards");
      }
      r.emplace_back(lo, hi);
    }
    ++p_;
    r = normalised(std::move(r));
    if (negated) r = complement(r);
    if (r.empty()) fail_at(at, "this class matches no character");
    return r;
  }

  int32_t any_char() {
    if (any_ < 0) any_ = b_.add("any-char", spell_ranges({{0, kMaxCodePoint}}));
    return any_;
  }

  std::string anon(const char* what) { return std::string(what) + "-" + std::to_string(++anon_); }

  std::string_view t_;
  size_t p_ = 0;
  GrammarBuilder b_;
  std::map<std::string, int32_t> rules_;
  std::map<std::string, size_t> used_at_;
  std::set<std::string> defined_;
  int anon_ = 0;
  int32_t any_ = -1;
};

}  // namespace

Result<Grammar> gbnf_grammar(std::string_view text) {
  if (text.size() > kMaxGbnfBytes)
    return make_error(Errc::invalid_argument, "GBNF: the grammar is " + std::to_string(text.size()) +
                                                  " bytes; at most " + std::to_string(kMaxGbnfBytes) +
                                                  " are taken");
  return Parser(text).run();
}

}  // namespace chorus
