// The values a Jinja template computes with, and their Python semantics: a chat template is
// written for Python's jinja2, so `{{ x }}` prints what Python's str(x) prints, `1 / 2` is 0.5,
// `-7 // 2` is -4, dicts keep their insertion order, and a missing attribute is an Undefined
// that prints as nothing.
//
// Internal to engine/template/: the public interface is jinja.h. Errors inside the interpreter
// are TemplateError exceptions, caught at jinja.h's two entry points and returned as Result.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace chorus::jinja {

// An error with the template line it happened on (0: not known yet; the renderer fills it in).
struct TemplateError : std::runtime_error {
  TemplateError(std::string message, int line = 0) : std::runtime_error(std::move(message)), line(line) {}
  int line;
};

// raise_exception("...") in a template: the template refuses its input.
struct TemplateRaised : TemplateError {
  using TemplateError::TemplateError;
};

// A rendering past one of RenderLimits (jinja.h), or a range() or repetition too long.
struct TemplateLimit : TemplateError {
  using TemplateError::TemplateError;
};

struct Value;
struct Args;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // in insertion order, like a dict
using Function = std::function<Value(Args&)>;

struct Value {
  enum class Kind { undefined, none, boolean, integer, floating, string, array, object, function };

  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> a;   // shared: a list is a reference, as in Python
  std::shared_ptr<Object> o;  // shared: a namespace's attributes change in place
  std::shared_ptr<Function> fn;
  bool is_namespace = false;   // an object made by namespace(): attributes may be set
  bool is_tuple = false;       // a list Python would print as a tuple: (1, 2)
  std::string undefined_hint;  // why it is undefined: "'dict object' has no attribute 'x'"

  Value() = default;
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value array(Array v = {});
  static Value tuple(Array v);
  static Value object(Object v = {});
  static Value function(Function f);
  static Value undefined(std::string hint);

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_none() const { return kind == Kind::none; }
  bool is_string() const { return kind == Kind::string; }
  bool is_array() const { return kind == Kind::array; }
  bool is_object() const { return kind == Kind::object; }
  bool is_number() const { return kind == Kind::boolean || kind == Kind::integer || kind == Kind::floating; }
  bool is_integral() const { return kind == Kind::boolean || kind == Kind::integer; }

  // The key's value in an object, or nullptr.
  const Value* find(std::string_view key) const;
  // Sets or adds `key` (objects only).
  void set(const std::string& key, Value v);
};

// A call's arguments: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;

  // The argument named `name`, or else the n-th positional one, or else `fallback`.
  Value get(size_t n, std::string_view name, Value fallback = {}) const;
  // Throws unless there are at most `n` positional arguments and only the listed keywords.
  void expect(std::string_view what, size_t n, std::initializer_list<std::string_view> keywords = {}) const;
};

// Python's type name, for messages: "str", "list", "dict", "NoneType", "undefined".
std::string type_name(const Value& v);

// Python's bool(v).
bool truthy(const Value& v);

// Python's str(v) and repr(v); an Undefined prints as "".
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string repr_float(double v);

// Python's float(v) of a number.
double as_double(const Value& v);
// A number that must be integral (an index, a count): throws otherwise.
int64_t as_int(const Value& v, std::string_view what);
// A value that must be a string: throws otherwise.
const std::string& as_string(const Value& v, std::string_view what);

// Python's ==, and <, > ... (throws where Python raises TypeError).
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0

// Python's `a in b`.
bool contains(const Value& container, const Value& item);

// The items a for loop visits: list elements, dict keys, string characters; Undefined: none.
Array iterate(const Value& v);

// len(v) for strings (in code points), lists and dicts.
int64_t length(const Value& v);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...), as
// transformers' chat templates define `tojson`. indent < 0: on one line.
std::string to_json(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep,
                    bool sort_keys);

// JSON data -> Value, keeping the order of object keys.
Value from_json(const nlohmann::ordered_json& j);

// The code points of a UTF-8 string (malformed bytes count one each) and back.
std::vector<std::string_view> code_points(std::string_view s);

}  // namespace chorus::jinja
