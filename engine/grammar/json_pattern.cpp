// The `pattern` keyword's regular expressions as grammar rules (engine/grammar/json_pattern.h).
#include "engine/grammar/json_pattern.h"

#include <string>
#include <utility>
#include <vector>

namespace chorus {
namespace {

using B = GrammarBuilder;
using Seq = GrammarBuilder::Seq;

class Pattern {
 public:
  std::string error;  // why it is refused ("": it is not)

  Pattern(B& b, int32_t json_char, std::string re, std::string at)
      : b_(b), chr_(json_char), re_(std::move(re)), at_(std::move(at)) {}

  int32_t compile() {
    const bool head = !re_.empty() && re_[0] == '^';
    if (head) ++i_;
    const bool tail = re_.size() > i_ && re_.back() == '$' && (re_.size() < 2 || re_[re_.size() - 2] != '\\');
    end_ = tail ? re_.size() - 1 : re_.size();
    const int32_t body = alternation();
    if (error.empty() && i_ != end_)
      error = "unexpected '" + std::string(1, re_[i_]) + "' at " + std::to_string(i_);
    if (!error.empty()) return -1;
    const int32_t any = b_.repeat(at_ + "/any", {B::ref(chr_)}, 0, -1);
    Seq q = B::literal("\"");
    if (!head) q.push_back(B::ref(any));
    q.push_back(B::ref(body));
    if (!tail) q.push_back(B::ref(any));
    q.push_back(B::byte('"'));
    return b_.add(at_, {q});
  }

 private:
  int32_t refuse(const std::string& what) {
    if (error.empty())
      error = what + " is not supported in a pattern (docs/structured-output.md lists what is)";
    return chr_;  // (a valid rule: nothing built from here on is used)
  }
  bool more() const { return i_ < end_; }

  int32_t alternation() {
    std::vector<Seq> alts{sequence()};
    while (more() && re_[i_] == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    return b_.add(at_ + "/alt", std::move(alts));
  }

  Seq sequence() {
    Seq q;
    while (more() && re_[i_] != '|' && re_[i_] != ')' && error.empty()) {
      const int32_t a = atom();
      q.push_back(B::ref(quantified(a)));
    }
    return q;
  }

  int32_t quantified(int32_t a) {
    if (!more()) return a;
    int64_t lo = -1, hi = -1;
    const char q = re_[i_];
    if (q == '*')
      lo = 0, hi = -1, ++i_;
    else if (q == '+')
      lo = 1, hi = -1, ++i_;
    else if (q == '?')
      lo = 0, hi = 1, ++i_;
    else if (q == '{') {
      const size_t close = re_.find('}', i_);
      if (close == std::string::npos || close >= end_) return refuse("an unclosed '{'");
      const std::string in = re_.substr(i_ + 1, close - i_ - 1);
      const size_t comma = in.find(',');
      auto number = [&](const std::string& t, int64_t& v) {
        if (t.empty() || t.size() > 4 || t.find_first_not_of("0123456789") != std::string::npos) return false;
        v = std::stoll(t);
        return true;
      };
      if (comma == std::string::npos ? !number(in, lo) : !number(in.substr(0, comma), lo))
        return refuse("'{" + in + "}'");
      hi = lo;
      if (comma != std::string::npos &&
          !(comma + 1 == in.size() ? (hi = -1, true) : number(in.substr(comma + 1), hi)))
        return refuse("'{" + in + "}'");
      if (hi >= 0 && hi < lo) return refuse("'{" + in + "}'");
      i_ = close + 1;
    } else {
      return a;
    }
    if (more() && (re_[i_] == '?' || re_[i_] == '+')) return refuse("a lazy or possessive quantifier");
    return b_.repeat(at_ + "/repeat", {B::ref(a)}, lo, hi);
  }

  // Bytes a JSON string writes as themselves: printable ASCII but " and \\.
  static ByteSet plain() { return B::range(0x20, 0x21) | B::range(0x23, 0x5B) | B::range(0x5D, 0x7E); }

  int32_t set(const ByteSet& bytes, bool quote, bool backslash) {
    std::vector<Seq> alts;
    if (bytes.any()) alts.push_back({B::bytes(bytes)});
    if (quote) alts.push_back(B::literal("\\\""));
    if (backslash) alts.push_back(B::literal("\\\\"));
    return b_.add(at_ + "/set", std::move(alts));
  }

  // A class escape (\\d \\w \\s and their negations), or a literal escaped character; false: refused.
  bool escape(char e, ByteSet& bytes, bool& quote, bool& backslash) {
    const ByteSet digit = B::range('0', '9'),
                  word = B::range('a', 'z') | B::range('A', 'Z') | digit | B::range('_', '_');
    switch (e) {
      case 'd': bytes = bytes | digit; return true;
      case 'w': bytes = bytes | word; return true;
      case 's': bytes = bytes | B::range(' ', ' '); return true;
      case 'D': bytes = bytes | (plain() & ~digit); return true;
      case 'W': bytes = bytes | (plain() & ~word); return true;
      case 'S': bytes = bytes | (plain() & ~B::range(' ', ' ')); return true;
      case '"': quote = true; return true;
      case '\\': backslash = true; return true;
      default:
        if (std::string("^$.|?*+()[]{}/-").find(e) == std::string::npos) return false;
        bytes = bytes | B::range(static_cast<uint8_t>(e), static_cast<uint8_t>(e));
        return true;
    }
  }

  int32_t atom() {
    const char ch = re_[i_++];
    if (ch == '(') {
      if (re_.compare(i_, 2, "?:") == 0)
        i_ += 2;
      else if (more() && re_[i_] == '?')
        return refuse("'(?' (lookaround or a named group)");
      const int32_t inner = alternation();
      if (!more() || re_[i_] != ')') return refuse("an unclosed '('");
      ++i_;
      return inner;
    }
    if (ch == '.') return set(plain(), false, false);
    if (ch == '[') return klass();
    if (ch == '\\') {
      if (!more()) return refuse("a trailing '\\'");
      ByteSet bytes;
      bool quote = false, backslash = false;
      if (!escape(re_[i_], bytes, quote, backslash))
        return refuse("the escape '\\" + std::string(1, re_[i_]) + "'");
      ++i_;
      return set(bytes, quote, backslash);
    }
    if (ch == '^' || ch == '$') return refuse("'" + std::string(1, ch) + "' but at the pattern's ends");
    if (std::string("*+?{").find(ch) != std::string::npos)
      return refuse("a quantifier with nothing before it");
    const auto u = static_cast<uint8_t>(ch);
    if (u < 0x20) return refuse("a control character");
    if (ch == '"') return set(ByteSet(), true, false);
    return b_.add(at_ + "/char", {{B::bytes(B::range(u, u))}});  // (UTF-8 bytes run in order)
  }

  int32_t klass() {
    const bool negate = more() && re_[i_] == '^';
    if (negate) ++i_;
    ByteSet bytes;
    bool quote = false, backslash = false, first = true;
    while (more() && (re_[i_] != ']' || first)) {
      first = false;
      uint8_t lo = static_cast<uint8_t>(re_[i_++]);
      if (lo == '\\') {
        if (!more()) return refuse("a trailing '\\'");
        const char e = re_[i_++];
        if (std::string("dwsDWS").find(e) != std::string::npos || e == '"' || e == '\\') {
          if (!escape(e, bytes, quote, backslash)) return refuse("the escape '\\" + std::string(1, e) + "'");
          continue;
        }
        if (!escape(e, bytes, quote, backslash)) return refuse("the escape '\\" + std::string(1, e) + "'");
        lo = static_cast<uint8_t>(e);
      }
      if (lo >= 0x80 || lo < 0x20) return refuse("a class with other than printable ASCII");
      uint8_t hi = lo;
      if (i_ + 1 < end_ && re_[i_] == '-' && re_[i_ + 1] != ']') {
        hi = static_cast<uint8_t>(re_[i_ + 1]);
        if (hi == '\\' || hi >= 0x80 || hi < lo)
          return refuse("the class range '" + re_.substr(i_ - 1, 3) + "'");
        i_ += 2;
      }
      for (unsigned c = lo; c <= hi; ++c) {
        if (c == '"')
          quote = true;
        else if (c == '\\')
          backslash = true;
        else
          bytes = bytes | B::range(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
      }
    }
    if (!more()) return refuse("an unclosed '['");
    ++i_;
    if (negate) return set(plain() & ~bytes, false, false);
    if (bytes == ByteSet() && !quote && !backslash) return refuse("an empty class");
    return set(bytes, quote, backslash);
  }

  B& b_;
  int32_t chr_;
  std::string re_, at_;
  size_t i_ = 0, end_ = 0;
};

}  // namespace

int32_t pattern_grammar(GrammarBuilder& b, int32_t json_char, const std::string& re, const std::string& at,
                        std::string* error) {
  Pattern p(b, json_char, re, at);
  const int32_t rule = p.compile();
  *error = p.error;
  return rule;
}

}  // namespace chorus
