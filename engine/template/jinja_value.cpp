#include "engine/template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace chorus::jinja {

Value Value::none() {
  Value v;
  v.kind = Kind::none;
  return v;
}

Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::boolean;
  v.b = x;
  v.i = x ? 1 : 0;
  return v;
}

Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::integer;
  v.i = x;
  return v;
}

Value Value::floating(double x) {
  Value v;
  v.kind = Kind::floating;
  v.f = x;
  return v;
}

Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::string;
  v.s = std::move(x);
  return v;
}

Value Value::array(Array x) {
  Value v;
  v.kind = Kind::array;
  v.a = std::make_shared<Array>(std::move(x));
  return v;
}

Value Value::tuple(Array x) {
  Value v = array(std::move(x));
  v.is_tuple = true;
  return v;
}

Value Value::object(Object x) {
  Value v;
  v.kind = Kind::object;
  v.o = std::make_shared<Object>(std::move(x));
  return v;
}

Value Value::function(Function f) {
  Value v;
  v.kind = Kind::function;
  v.fn = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.undefined_hint = std::move(hint);
  return v;
}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::object) return nullptr;
  for (const auto& [k, v] : *o)
    if (k == key) return &v;
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *o)
    if (k == key) {
      old = std::move(v);
      return;
    }
  o->emplace_back(key, std::move(v));
}

Value Args::get(size_t n, std::string_view name, Value fallback) const {
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  if (n < pos.size()) return pos[n];
  return fallback;
}

void Args::expect(std::string_view what, size_t n, std::initializer_list<std::string_view> keywords) const {
  if (pos.size() > n)
    throw TemplateError(std::string(what) + " takes at most " + std::to_string(n) +
                        " positional argument(s), got " + std::to_string(pos.size()));
  for (const auto& [k, v] : kw)
    if (std::find(keywords.begin(), keywords.end(), k) == keywords.end())
      throw TemplateError(std::string(what) + " got an unexpected keyword argument '" + k + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "undefined";
    case Value::Kind::none: return "NoneType";
    case Value::Kind::boolean: return "bool";
    case Value::Kind::integer: return "int";
    case Value::Kind::floating: return "float";
    case Value::Kind::string: return "str";
    case Value::Kind::array: return "list";
    case Value::Kind::object: return v.is_namespace ? "Namespace" : "dict";
    case Value::Kind::function: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: return false;
    case Value::Kind::boolean: return v.b;
    case Value::Kind::integer: return v.i != 0;
    case Value::Kind::floating: return v.f != 0;
    case Value::Kind::string: return !v.s.empty();
    case Value::Kind::array: return !v.a->empty();
    case Value::Kind::object: return v.is_namespace || !v.o->empty();
    case Value::Kind::function: return true;
  }
  return false;
}

// Python's float repr: the shortest digits that read back, fixed notation for exponents in
// [-4, 16), else d.ddde+XX.
std::string repr_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // e.g. "-1.2345e+02"
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out +=
          digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + buf;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::string: return repr_string(v.s);
    case Value::Kind::array: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.a->size(); ++k) out += (k ? ", " : "") + repr((*v.a)[k]);
      if (v.is_tuple) return out + (v.a->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::object: {
      std::string out = v.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : *v.o) {
        out += (first ? "" : ", ") + repr_string(k) + ": " + repr(x);
        first = false;
      }
      return out + (v.is_namespace ? "}>" : "}");
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "";
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return v.b ? "True" : "False";
    case Value::Kind::integer: return std::to_string(v.i);
    case Value::Kind::floating: return repr_float(v.f);
    case Value::Kind::string: return v.s;
    case Value::Kind::function: return "<function>";
    default: return repr(v);
  }
}

double as_double(const Value& v) {
  if (v.kind == Value::Kind::floating) return v.f;
  if (v.is_integral()) return static_cast<double>(v.i);
  throw TemplateError("expected a number, got " + type_name(v));
}

int64_t as_int(const Value& v, std::string_view what) {
  if (v.is_integral()) return v.i;
  throw TemplateError(std::string(what) + " must be an integer, got " + type_name(v));
}

const std::string& as_string(const Value& v, std::string_view what) {
  if (v.is_string()) return v.s;
  throw TemplateError(std::string(what) + " must be a string, got " + type_name(v));
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.i == b.i;
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return a.s == b.s;
    case Value::Kind::array:
      if (a.a->size() != b.a->size()) return false;
      for (size_t k = 0; k < a.a->size(); ++k)
        if (!equal((*a.a)[k], (*b.a)[k])) return false;
      return true;
    case Value::Kind::object:
      if (a.o->size() != b.o->size()) return false;
      for (const auto& [k, x] : *a.o) {
        const Value* y = b.find(k);
        if (y == nullptr || !equal(x, *y)) return false;
      }
      return true;
    case Value::Kind::function: return a.fn == b.fn;
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
    const double x = as_double(a), y = as_double(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
  if (a.is_array() && b.is_array()) {
    for (size_t k = 0; k < std::min(a.a->size(), b.a->size()); ++k)
      if (int c = compare((*a.a)[k], (*b.a)[k]); c != 0) return c;
    return a.a->size() < b.a->size() ? -1 : a.a->size() > b.a->size() ? 1 : 0;
  }
  throw TemplateError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) +
                      "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::Kind::string:
      if (!item.is_string())
        throw TemplateError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Value::Kind::array:
      return std::any_of(container.a->begin(), container.a->end(),
                         [&](const Value& x) { return equal(x, item); });
    case Value::Kind::object: return item.is_string() && container.find(item.s) != nullptr;
    case Value::Kind::undefined: return false;
    default: throw TemplateError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    const auto c = static_cast<unsigned char>(s[k]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (k + n > s.size()) n = 1;
    for (size_t j = 1; j < n; ++j)
      if ((static_cast<unsigned char>(s[k + j]) & 0xC0) != 0x80) n = 1;
    out.push_back(s.substr(k, n));
    k += n;
  }
  return out;
}

Array iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return {};
    case Value::Kind::array: return *v.a;
    case Value::Kind::object: {
      Array keys;
      for (const auto& [k, x] : *v.o) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::string: {
      Array chars;
      for (std::string_view c : code_points(v.s)) chars.push_back(Value::string(std::string(c)));
      return chars;
    }
    default: throw TemplateError("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return 0;
    case Value::Kind::string: return static_cast<int64_t>(code_points(v.s).size());
    case Value::Kind::array: return static_cast<int64_t>(v.a->size());
    case Value::Kind::object: return static_cast<int64_t>(v.o->size());
    default: throw TemplateError("object of type '" + type_name(v) + "' has no len()");
  }
}

namespace {

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  std::string_view item_sep, key_sep;
  bool sort_keys;
  std::string out;

  void newline(int depth) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * depth), ' ');
  }

  void write(const Value& v, int depth) {
    switch (v.kind) {
      case Value::Kind::undefined:
      case Value::Kind::none: out += "null"; return;
      case Value::Kind::boolean: out += v.b ? "true" : "false"; return;
      case Value::Kind::integer: out += std::to_string(v.i); return;
      case Value::Kind::floating:
        out += std::isnan(v.f)   ? "NaN"
               : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                                 : repr_float(v.f);
        return;
      case Value::Kind::string: json_string(out, v.s); return;
      case Value::Kind::array:
        if (v.a->empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t k = 0; k < v.a->size(); ++k) {
          if (k) out += item_sep;
          newline(depth + 1);
          write((*v.a)[k], depth + 1);
        }
        newline(depth);
        out += ']';
        return;
      case Value::Kind::object: {
        if (v.o->empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : *v.o) items.push_back(&kv);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
        out += '{';
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) out += item_sep;
          newline(depth + 1);
          json_string(out, items[k]->first);
          out += key_sep;
          write(items[k]->second, depth + 1);
        }
        newline(depth);
        out += '}';
        return;
      }
      case Value::Kind::function: throw TemplateError("Object of type function is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_json(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep,
                    bool sort_keys) {
  JsonWriter w{indent, item_sep, key_sep, sort_keys, {}};
  w.write(v, 0);
  return std::move(w.out);
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& x : j) a.push_back(from_json(x));
      return Value::array(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (const auto& [k, x] : j.items()) o.emplace_back(k, from_json(x));
      return Value::object(std::move(o));
    }
    default: return Value::none();
  }
}

}  // namespace chorus::jinja
