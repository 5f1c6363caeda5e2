#include "engine/template/jinja_builtins.h"

#include <algorithm>
#include <ctime>

#include "engine/template/jinja_strings.h"

namespace chorus::jinja {

namespace {

Value method(Function f) {
  return Value::function(std::move(f));
}

bool has_prefix(const std::string& s, const Value& prefix, bool at_end) {
  auto one = [&](const Value& p) {
    const std::string& x = as_string(p, "a prefix");
    if (x.size() > s.size()) return false;
    return at_end ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (prefix.is_array()) return std::any_of(prefix.a->begin(), prefix.a->end(), one);
  return one(prefix);
}

Value string_search_method(const std::string& s, const std::string& name);

// strip, split, startswith, the case changes; the others in string_search_method.
Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return method([s, left, right](Args& a) {
      a.expect("str.strip", 1);
      const Value chars = a.get(0, "");
      return Value::string(strip(s, chars.is_string() ? chars.s : std::string(kWhitespace), left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return method([s, from_right](Args& a) {
      a.expect("str.split", 2, {"sep", "maxsplit"});
      const Value sep = a.get(0, "sep");
      const Value max = a.get(1, "maxsplit", Value::integer(-1));
      Array out;
      for (std::string& part :
           split(s, sep.is_string() ? &sep.s : nullptr, as_int(max, "maxsplit"), from_right))
        out.push_back(Value::string(std::move(part)));
      return Value::array(std::move(out));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool at_end = name == "endswith";
    return method([s, at_end](Args& a) {
      a.expect("str.startswith", 1);
      return Value::boolean(has_prefix(s, a.get(0, ""), at_end));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return method([s, name](Args& a) {
      a.expect("str." + name, 0);
      return Value::string(change_case(s, name));
    });
  }
  return string_search_method(s, name);
}

// replace, find, join, removeprefix, splitlines, the is* tests.
Value string_search_method(const std::string& s, const std::string& name) {
  if (name == "replace") {
    return method([s](Args& a) {
      a.expect("str.replace", 3);
      return Value::string(replace(s, as_string(a.get(0, ""), "old"), as_string(a.get(1, ""), "new"),
                                   as_int(a.get(2, "", Value::integer(-1)), "count")));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return method([s, name](Args& a) {
      a.expect("str." + name, 1);
      const std::string sub = as_string(a.get(0, ""), "the substring");
      if (name == "count") return Value::integer(count(s, sub));
      const size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos && name == "index") throw TemplateError("substring not found");
      return Value::integer(at == std::string::npos ? -1 : char_index(s, at));
    });
  }
  if (name == "join") {
    return method([s](Args& a) {
      a.expect("str.join", 1);
      std::string out;
      bool first = true;
      for (const Value& v : iterate(a.get(0, ""))) {
        out += (first ? "" : s) + as_string(v, "each joined item");
        first = false;
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool suffix = name == "removesuffix";
    return method([s, suffix](Args& a) {
      a.expect("str.removeprefix", 1);
      const Value p = a.get(0, "");
      if (!has_prefix(s, p, suffix)) return Value::string(s);
      return Value::string(suffix ? s.substr(0, s.size() - p.s.size()) : s.substr(p.s.size()));
    });
  }
  if (name == "splitlines") {
    return method([s](Args& a) {
      a.expect("str.splitlines", 0);
      Array out;
      for (std::string& line : split_lines(s)) out.push_back(Value::string(std::move(line)));
      return Value::array(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    return method([s, name](Args& a) {
      a.expect("str." + name, 0);
      return Value::boolean(char_class(s, name));
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return method([d, name](Args& a) {
      a.expect("dict." + name, 0);
      Array out;
      for (const auto& [k, v] : *d.o) {
        if (name == "items") out.push_back(Value::tuple({Value::string(k), v}));
        if (name == "keys") out.push_back(Value::string(k));
        if (name == "values") out.push_back(v);
      }
      return Value::array(std::move(out));
    });
  }
  if (name == "get") {
    return method([d](Args& a) {
      a.expect("dict.get", 2);
      const Value key = a.get(0, "");
      const Value* v = key.is_string() ? d.find(key.s) : nullptr;
      return v != nullptr ? *v : a.get(1, "", Value::none());
    });
  }
  static constexpr std::string_view mutating[] = {"update", "pop", "setdefault", "clear", "popitem"};
  for (std::string_view m : mutating)
    if (name == m)
      return method([name](Args&) -> Value {
        throw TemplateError("dict." + name + " is refused: templates render in an immutable sandbox");
      });
  return {};
}

Value list_method(const std::string& name) {
  static constexpr std::string_view mutating[] = {"append", "extend", "insert", "pop",
                                                  "remove", "sort",   "clear",  "reverse"};
  for (std::string_view m : mutating)
    if (name == m)
      return method([name](Args&) -> Value {
        throw TemplateError("list." + name + " is refused: templates render in an immutable sandbox");
      });
  return {};
}

[[noreturn]] void undefined_use(const Value& obj) {
  throw TemplateError(obj.undefined_hint.empty() ? "use of an undefined value" : obj.undefined_hint);
}

int64_t norm_index(int64_t k, int64_t n) {
  return k < 0 ? k + n : k;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_use(obj);
  if (obj.is_string()) return string_method(obj.s, name);
  if (obj.is_object()) {
    if (!obj.is_namespace)
      if (Value m = dict_method(obj, name); !m.is_undefined()) return m;
    if (const Value* v = obj.find(name)) return *v;
    return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
  }
  if (obj.is_array())
    if (Value m = list_method(name); !m.is_undefined()) return m;
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_use(obj);
  if (obj.is_object() && key.is_string()) {
    if (const Value* v = obj.find(key.s)) return *v;
    return get_attr(obj, key.s);
  }
  if ((obj.is_array() || obj.is_string()) && key.is_integral()) {
    if (obj.is_array()) {
      const int64_t n = static_cast<int64_t>(obj.a->size());
      const int64_t k = norm_index(key.i, n);
      if (k >= 0 && k < n) return (*obj.a)[static_cast<size_t>(k)];
    } else {
      const auto cps = code_points(obj.s);
      const int64_t n = static_cast<int64_t>(cps.size());
      const int64_t k = norm_index(key.i, n);
      if (k >= 0 && k < n) return Value::string(std::string(cps[static_cast<size_t>(k)]));
    }
    return Value::undefined(type_name(obj) + " index " + std::to_string(key.i) + " out of range");
  }
  if (key.is_string()) return get_attr(obj, key.s);
  return Value::undefined("'" + type_name(obj) + " object' has no item " + repr(key));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (obj.is_undefined()) undefined_use(obj);
  std::vector<Value> items;
  std::vector<std::string_view> cps;
  int64_t n = 0;
  if (obj.is_array()) {
    n = static_cast<int64_t>(obj.a->size());
  } else if (obj.is_string()) {
    cps = code_points(obj.s);
    n = static_cast<int64_t>(cps.size());
  } else {
    throw TemplateError("'" + type_name(obj) + "' object is not subscriptable");
  }
  const int64_t step = step_v.is_none() || step_v.is_undefined() ? 1 : as_int(step_v, "a slice step");
  if (step == 0) throw TemplateError("slice step cannot be zero");
  auto bound = [&](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t k = as_int(v, "a slice index");
    if (k < 0) k += n;
    if (step > 0) return std::clamp<int64_t>(k, 0, n);
    return std::clamp<int64_t>(k, -1, n - 1);
  };
  const int64_t lo = bound(start, step > 0 ? 0 : n - 1);
  const int64_t hi = bound(stop, step > 0 ? n : -1);
  Array out_a;
  std::string out_s;
  for (int64_t k = lo; step > 0 ? k < hi : k > hi; k += step) {
    if (obj.is_array())
      out_a.push_back((*obj.a)[static_cast<size_t>(k)]);
    else
      out_s += cps[static_cast<size_t>(k)];
  }
  return obj.is_array() ? Value::array(std::move(out_a)) : Value::string(std::move(out_s));
}

Object global_functions() {
  Object g;
  g.emplace_back("range", method([](Args& a) {
                   a.expect("range", 3);
                   int64_t start = 0, stop = 0, step = 1;
                   if (a.pos.size() == 1) {
                     stop = as_int(a.pos[0], "range's stop");
                   } else if (a.pos.size() >= 2) {
                     start = as_int(a.pos[0], "range's start");
                     stop = as_int(a.pos[1], "range's stop");
                     if (a.pos.size() == 3) step = as_int(a.pos[2], "range's step");
                   }
                   if (step == 0) throw TemplateError("range() arg 3 must not be zero");
                   Array out;
                   for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
                     if (out.size() >= 100000) throw TemplateLimit("range() longer than 100000 items");
                     out.push_back(Value::integer(k));
                   }
                   return Value::array(std::move(out));
                 }));
  auto from_kwargs = [](Args& a, bool ns) {
    Value v = Value::object();
    v.is_namespace = ns;
    if (!a.pos.empty()) {
      if (!a.pos[0].is_object())
        throw TemplateError("namespace() and dict() take a dict or keyword arguments");
      for (const auto& [k, x] : *a.pos[0].o) v.set(k, x);
    }
    for (auto& [k, x] : a.kw) v.set(k, x);
    return v;
  };
  g.emplace_back("namespace", method([from_kwargs](Args& a) { return from_kwargs(a, true); }));
  g.emplace_back("dict", method([from_kwargs](Args& a) { return from_kwargs(a, false); }));
  g.emplace_back("raise_exception",
                 method([](Args& a) -> Value { throw TemplateRaised(to_str(a.get(0, "message"))); }));
  g.emplace_back("strftime_now", method([](Args& a) {
                   a.expect("strftime_now", 1);
                   const std::string fmt = as_string(a.get(0, ""), "strftime_now's format");
                   const std::time_t now = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&now, &tm);
                   char buf[256];
                   const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
                   return Value::string(std::string(buf, n));
                 }));
  return g;
}

}  // namespace chorus::jinja
