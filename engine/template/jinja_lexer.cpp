#include "engine/template/jinja_lexer.h"

#include <cctype>
#include <cstdlib>

#include "base/utf8.h"
#include "engine/template/jinja_value.h"

namespace chorus::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Segment> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t q = find_tag(pos_);
      std::string text(src_.substr(pos_, q - pos_));
      if (q == src_.size()) {
        add_text(std::move(text));
        pos_ = q;
        break;
      }
      const char kind = src_[q + 1];
      size_t p = q + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || (src_[p] == '+' && kind != '{'))) sign = src_[p++];
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && kind != '{') {
        lstrip(text, line_starting);
      }
      add_text(std::move(text));
      count_lines(pos_, q);
      pos_ = p;
      const int tag_line = line_;
      if (kind == '#') {
        line_starting = comment();
      } else {
        Segment seg{kind == '{' ? Segment::Kind::output : Segment::Kind::block, {}, {}, tag_line};
        line_starting = tokens(seg, kind == '{' ? '}' : '%');
        if (seg.kind == Segment::Kind::block && seg.tokens.size() == 1 && seg.tokens[0].text == "raw" &&
            seg.tokens[0].kind == Token::Kind::name) {
          line_starting = raw();
        } else {
          out_.push_back(std::move(seg));
        }
      }
    }
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw TemplateError(what, line_); }

  size_t find_tag(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return src_.size();
  }

  void count_lines(size_t from, size_t to) {
    for (size_t k = from; k < to && k < src_.size(); ++k)
      if (src_[k] == '\n') ++line_;
  }

  void add_text(std::string text) {
    if (text.empty()) return;
    out_.push_back(Segment{Segment::Kind::text, std::move(text), {}, line_});
  }

  static void lstrip(std::string& text, bool line_starting) {
    const size_t nl = text.rfind('\n');
    const size_t from = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !line_starting) return;
    for (size_t k = from; k < text.size(); ++k)
      if (text[k] != ' ' && text[k] != '\t') return;
    text.resize(from);
  }

  // After a closing delimiter: `-` strips all whitespace, trim_blocks one newline (block and
  // comment tags only, not after `+`). Returns whether what was consumed ends a line.
  bool after_close(char sign, bool trims) {
    bool ended_line = false;
    if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        ended_line = src_[pos_] == '\n';
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
    } else if (sign != '+' && trims && pos_ < src_.size() && src_[pos_] == '\n') {
      ++line_;
      ++pos_;
      ended_line = true;
    }
    return ended_line;
  }

  bool comment() {
    for (size_t k = pos_; k + 1 < src_.size(); ++k) {
      if (src_[k] == '#' && src_[k + 1] == '}') {
        const char sign = k > pos_ && (src_[k - 1] == '-' || src_[k - 1] == '+') ? src_[k - 1] : 0;
        count_lines(pos_, k);
        pos_ = k + 2;
        return after_close(sign, true);
      }
    }
    fail("unclosed comment: {# without #}");
  }

  // The text up to {% endraw %}, verbatim.
  bool raw() {
    for (size_t k = pos_; k + 1 < src_.size(); ++k) {
      if (src_[k] != '{' || src_[k + 1] != '%') continue;
      size_t p = k + 2;
      const bool strip_before = p < src_.size() && src_[p] == '-';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) continue;
      std::string text(src_.substr(pos_, k - pos_));
      if (strip_before)
        while (!text.empty() && is_space(text.back())) text.pop_back();
      add_text(std::move(text));
      count_lines(pos_, p);
      pos_ = p + 2;
      return after_close(sign, true);
    }
    fail("unclosed {% raw %}: no {% endraw %}");
  }

  // The tokens of an expression or statement tag, up to its closing delimiter `close`}.
  bool tokens(Segment& seg, char close) {
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) fail(close == '}' ? "unclosed {{: no }}" : "unclosed {%: no %}");
      const char c = src_[pos_];
      if (depth == 0) {
        char sign = 0;
        size_t p = pos_;
        if ((c == '-' || c == '+') && p + 1 < src_.size()) {
          sign = c;
          ++p;
        }
        if (src_.compare(p, 2, std::string{close, '}'}) == 0 && (sign != '+' || close == '%')) {
          pos_ = p + 2;
          return after_close(sign, close == '%');
        }
      }
      Token t{Token::Kind::op, {}, 0, 0, line_};
      if (c == '\'' || c == '"') {
        t.kind = Token::Kind::string;
        t.text = string_literal(c);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number(t);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        t.kind = Token::Kind::name;
        t.text = std::string(src_.substr(pos_, e - pos_));
        pos_ = e;
      } else {
        static constexpr std::string_view two[] = {"**", "//", "==", "!=", "<=", ">="};
        for (std::string_view op : two)
          if (src_.compare(pos_, 2, op) == 0) t.text = std::string(op);
        if (t.text.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
            fail(std::string("unexpected character '") + c + "' in a tag");
          t.text = std::string(1, c);
        }
        pos_ += t.text.size();
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if ((t.text == ")" || t.text == "]" || t.text == "}") && depth > 0) --depth;
      }
      seg.tokens.push_back(std::move(t));
    }
  }

  void number(Token& t) {
    size_t e = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    };
    digits();
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        is_float = true;
        e = x;
        digits();
      }
    }
    std::string text;
    for (size_t k = pos_; k < e; ++k)
      if (src_[k] != '_') text += src_[k];
    pos_ = e;
    if (is_float) {
      t.kind = Token::Kind::floating;
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = Token::Kind::integer;
      t.i = std::strtoll(text.c_str(), nullptr, 10);
    }
    t.text = text;
  }

  // A string literal with Python's escapes.
  std::string string_literal(char quote) {
    std::string out;
    size_t k = pos_ + 1;
    while (true) {
      if (k >= src_.size()) fail("unclosed string literal");
      const char c = src_[k];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || k + 1 >= src_.size()) {
        out += c;
        ++k;
        continue;
      }
      const char e = src_[k + 1];
      k += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': ++line_; break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (k + n > src_.size()) fail("truncated \\" + std::string(1, e) + " escape");
          const std::string hex(src_.substr(k, n));
          char* end = nullptr;
          const unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
          if (end != hex.c_str() + n) fail("malformed \\" + std::string(1, e) + " escape");
          append_utf8(out, static_cast<uint32_t>(cp));
          k += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int d = 0; d < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++d, ++k)
              cp = cp * 8 + static_cast<uint32_t>(src_[k] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    pos_ = k + 1;
    return out;
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Segment> out_;
};

}  // namespace

std::vector<Segment> lex(std::string_view source) {
  std::string norm;
  norm.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      norm += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      norm += source[k];
    }
  }
  if (!norm.empty() && norm.back() == '\n') norm.pop_back();
  return Lexer(norm).run();
}

}  // namespace chorus::jinja
