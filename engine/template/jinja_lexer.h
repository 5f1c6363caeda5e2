// The lexer of Jinja templates: text, {{ expressions }}, {% statements %} and {# comments #},
// with jinja2's whitespace control as transformers configures it for chat templates:
//   trim_blocks     the first newline after a %} or #} is dropped
//   lstrip_blocks   spaces and tabs from the start of a line up to a {% or {# are dropped
//   {%- -%} {{- -}} strip all whitespace before / after; {%+ and +%} turn the two above off
// and one trailing newline of the template dropped (keep_trailing_newline = False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::jinja {

struct Token {
  enum class Kind { name, string, integer, floating, op };
  Kind kind;
  std::string text;  // a name, an operator, or a string's value
  int64_t i = 0;
  double f = 0;
  int line = 0;
};

struct Segment {
  enum class Kind { text, output, block };
  Kind kind;
  std::string text;           // text
  std::vector<Token> tokens;  // output, block
  int line = 0;
};

// Throws TemplateError (with the line) on an unclosed tag, string or comment.
std::vector<Segment> lex(std::string_view source);

}  // namespace chorus::jinja
