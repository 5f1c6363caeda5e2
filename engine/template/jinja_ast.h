// A parsed Jinja template: expressions and statements, as the parser (jinja_parser.cpp) builds
// them and the renderer (jinja_render.cpp) walks them. Filters and tests are resolved to their
// functions when parsed, so an unknown name is a load-time error, as in jinja2.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/template/jinja_value.h"

namespace chorus::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// A filter: value | name(args). A test: value is name(args).
using FilterFn = Value (*)(const Value& value, Args& args);
using TestFn = bool (*)(const Value& value, Args& args);

FilterFn find_filter(const std::string& name);  // nullptr when jinja2 has no such filter here
TestFn find_test(const std::string& name);

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // [items...], and tuples (a, b) (name "tuple")
    dict,       // {items[0]: items[1], ...}
    attr,       // items[0].name
    index,      // items[0][items[1]]
    slice,      // items[0][items[1]:items[2]:items[3]] (a null item: left out)
    call,       // items[0](items[1..], kwnames -> kwargs)
    filter,     // items[0] | name(items[1..], kwargs)
    test,       // items[0] is [not] name(items[1..])
    unary,      // op items[0]: "-", "+", "not"
    binary,     // items[0] op items[1]: + - * / // % ** ~ and or
    compare,    // items[0] ops[0] items[1] ops[1] items[2] ...: == != < <= > >= in "not in"
    condition,  // items[0] if items[1] else items[2] (items[2] null: Undefined)
  };

  Kind kind;
  int line = 0;
  Value value;                   // literal
  std::string name;              // name, attr, filter/test name; op for unary/binary
  std::vector<std::string> ops;  // compare
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call, filter, test
  FilterFn filter = nullptr;
  TestFn test = nullptr;
  bool negated = false;  // is not
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    text,       // text
    output,     // {{ expr }}
    if_,        // conditions[k] -> bodies[k]; else_body
    for_,       // for targets in expr [if filter]: body; else_body
    set,        // set targets = expr; or set targets[0].attr = expr (attr non-empty)
    set_block,  // {% set targets[0] %}body{% endset %}
    macro,      // {% macro name(params = defaults) %}body{% endmacro %}
    filter,     // {% filter expr %}body{% endfilter %}: expr is a filter applied to the body
    break_,
    continue_,
  };

  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr loop_filter;
  std::vector<std::string> targets;
  std::string attr;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param; null: no default
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
};

struct Program {
  Body body;
};

// Parses a template as transformers' chat templates are compiled: trim_blocks, lstrip_blocks,
// loop controls (break, continue), one trailing newline dropped. Throws TemplateError.
std::shared_ptr<const Program> parse_program(std::string_view source);

}  // namespace chorus::jinja
