// jinja2's built-in filters and tests that chat templates use, with transformers' `tojson`
// (json.dumps with ensure_ascii=False and the indent/separators/sort_keys it is given).
// A filter or test that jinja2 has and chorus lacks is an error when the template is loaded.
#include <algorithm>
#include <cmath>
#include <map>

#include "engine/template/jinja_ast.h"
#include "engine/template/jinja_builtins.h"
#include "engine/template/jinja_strings.h"

namespace chorus::jinja {

namespace {

// value.attribute, where "a.b" walks and "0" indexes.
Value attribute_of(const Value& v, const std::string& path) {
  Value cur = v;
  size_t k = 0;
  while (k <= path.size()) {
    size_t dot = path.find('.', k);
    if (dot == std::string::npos) dot = path.size();
    const std::string part = path.substr(k, dot - k);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    if (cur.is_undefined()) return cur;
    cur = digits && cur.is_array() ? get_item(cur, Value::integer(std::stoll(part)))
                                   : get_item(cur, Value::string(part));
    k = dot + 1;
  }
  return cur;
}

std::string lower_ascii(const std::string& s) {
  return change_case(s, "lower");
}

// sort()'s and dictsort()'s key: strings compared without case unless asked.
Value sort_key(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value::string(lower_ascii(v.s)) : v;
}

Value f_tojson(const Value& v, Args& a) {
  a.expect("tojson", 1, {"ensure_ascii", "indent", "separators", "sort_keys"});
  const bool ascii = truthy(a.get(0, "ensure_ascii", Value::boolean(false)));
  const Value indent = a.get(99, "indent", Value::none());
  const Value seps = a.get(99, "separators", Value::none());
  const bool sort_keys = truthy(a.get(99, "sort_keys", Value::boolean(false)));
  const int n = indent.is_none() ? -1 : static_cast<int>(as_int(indent, "tojson's indent"));
  std::string item_sep = n < 0 ? ", " : ",", key_sep = ": ";
  if (seps.is_array() && seps.a->size() == 2) {
    item_sep = as_string((*seps.a)[0], "a separator");
    key_sep = as_string((*seps.a)[1], "a separator");
  }
  std::string out = to_json(v, n, item_sep, key_sep, sort_keys);
  if (!ascii) return Value::string(std::move(out));
  std::string esc;
  for (std::string_view c : code_points(out)) {
    if (c.size() == 1) {
      esc += c;
      continue;
    }
    const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(c[k])); };
    uint32_t cp = c.size() == 2 ? ((b(0) & 0x1F) << 6) | (b(1) & 0x3F)
                  : c.size() == 3
                      ? ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F)
                      : ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    char buf[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    }
    esc += buf;
  }
  return Value::string(std::move(esc));
}

Value f_trim(const Value& v, Args& a) {
  a.expect("trim", 1, {"chars"});
  const Value chars = a.get(0, "chars", Value::none());
  return Value::string(strip(to_str(v), chars.is_string() ? chars.s : std::string(kWhitespace), true, true));
}

Value f_length(const Value& v, Args& a) {
  a.expect("length", 0);
  return Value::integer(length(v));
}

template <int Case>
Value f_case(const Value& v, Args& a) {
  static constexpr std::string_view names[] = {"upper", "lower", "title", "capitalize"};
  a.expect(names[Case], 0);
  return Value::string(change_case(to_str(v), names[Case]));
}

Value f_replace(const Value& v, Args& a) {
  a.expect("replace", 3);
  return Value::string(replace(to_str(v), to_str(a.get(0, "")), to_str(a.get(1, "")),
                               as_int(a.get(2, "", Value::integer(-1)), "count")));
}

Value f_join(const Value& v, Args& a) {
  a.expect("join", 2, {"d", "attribute"});
  const std::string sep = to_str(a.get(0, "d", Value::string("")));
  const Value attr = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    out += (first ? "" : sep) + to_str(attr.is_none() ? x : attribute_of(x, to_str(attr)));
    first = false;
  }
  return Value::string(std::move(out));
}

Value f_default(const Value& v, Args& a) {
  a.expect("default", 2, {"default_value", "boolean"});
  const bool boolean = truthy(a.get(1, "boolean", Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0, "default_value", Value::string(""));
  return v;
}

Value f_first(const Value& v, Args& a) {
  a.expect("first", 0);
  Array items = iterate(v);
  return items.empty() ? Value::undefined("first of an empty sequence") : items.front();
}

Value f_last(const Value& v, Args& a) {
  a.expect("last", 0);
  Array items = iterate(v);
  return items.empty() ? Value::undefined("last of an empty sequence") : items.back();
}

Value f_list(const Value& v, Args& a) {
  a.expect("list", 0);
  return Value::array(iterate(v));
}

Value f_string(const Value& v, Args& a) {
  a.expect("string", 0);
  return Value::string(to_str(v));
}

Value f_int(const Value& v, Args& a) {
  a.expect("int", 2, {"default", "base"});
  const Value dflt = a.get(0, "default", Value::integer(0));
  if (v.is_integral()) return Value::integer(v.i);
  if (v.kind == Value::Kind::floating) return Value::integer(static_cast<int64_t>(v.f));
  if (v.is_string()) {
    const std::string s = strip(v.s, kWhitespace, true, true);
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::integer(i);
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::integer(static_cast<int64_t>(d));
  }
  return dflt;
}

Value f_float(const Value& v, Args& a) {
  a.expect("float", 1, {"default"});
  if (v.is_number()) return Value::floating(as_double(v));
  if (v.is_string()) {
    const std::string s = strip(v.s, kWhitespace, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::floating(d);
  }
  return a.get(0, "default", Value::floating(0));
}

Value f_abs(const Value& v, Args& a) {
  a.expect("abs", 0);
  if (v.is_integral()) return Value::integer(v.i < 0 ? -v.i : v.i);
  return Value::floating(std::fabs(as_double(v)));
}

Value f_round(const Value& v, Args& a) {
  a.expect("round", 2, {"precision", "method"});
  const int64_t precision = as_int(a.get(0, "precision", Value::integer(0)), "round's precision");
  const std::string how = to_str(a.get(1, "method", Value::string("common")));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = as_double(v) * scale;
  const double r = how == "ceil"    ? std::ceil(x)
                   : how == "floor" ? std::floor(x)
                                    : std::nearbyint(x);  // half to even, as Python
  if (how != "common" && how != "ceil" && how != "floor")
    throw TemplateError("round's method must be common, ceil or floor");
  return Value::floating(r / scale);
}

Value f_items(const Value& v, Args& a) {
  a.expect("items", 0);
  if (v.is_undefined()) return Value::array();
  if (!v.is_object()) throw TemplateError("items() of a " + type_name(v) + ", not a dict");
  Array out;
  for (const auto& [k, x] : *v.o) out.push_back(Value::tuple({Value::string(k), x}));
  return Value::array(std::move(out));
}

Value f_dictsort(const Value& v, Args& a) {
  a.expect("dictsort", 3, {"case_sensitive", "by", "reverse"});
  const bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  const bool by_value = to_str(a.get(1, "by", Value::string("key"))) == "value";
  const bool rev = truthy(a.get(2, "reverse", Value::boolean(false)));
  Args none;
  Array items = *f_items(v, none).a;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare(sort_key((*x.a)[by_value], cs), sort_key((*y.a)[by_value], cs));
    return rev ? c > 0 : c < 0;
  });
  return Value::array(std::move(items));
}

// select / reject / selectattr / rejectattr: items for which the test (or truthiness) holds.
Value pick(const Value& v, Args& a, bool by_attr, bool keep) {
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty()) throw TemplateError("selectattr needs an attribute name");
    attr = as_string(a.pos[next++], "the attribute name");
  }
  TestFn test = nullptr;
  Args test_args;
  if (next < a.pos.size()) {
    const std::string& name = as_string(a.pos[next++], "the test name");
    test = find_test(name);
    if (test == nullptr) throw TemplateError("no test named '" + name + "'");
    test_args.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(next), a.pos.end());
  }
  Array out;
  for (const Value& x : iterate(v)) {
    const Value subject = by_attr ? attribute_of(x, attr) : x;
    const bool ok = test != nullptr ? test(subject, test_args) : truthy(subject);
    if (ok == keep) out.push_back(x);
  }
  return Value::array(std::move(out));
}

Value f_select(const Value& v, Args& a) {
  return pick(v, a, false, true);
}
Value f_reject(const Value& v, Args& a) {
  return pick(v, a, false, false);
}
Value f_selectattr(const Value& v, Args& a) {
  return pick(v, a, true, true);
}
Value f_rejectattr(const Value& v, Args& a) {
  return pick(v, a, true, false);
}

Value f_map(const Value& v, Args& a) {
  Array out;
  const Value attr = a.get(99, "attribute");
  if (!attr.is_undefined()) {
    const Value dflt = a.get(99, "default");
    for (const Value& x : iterate(v)) {
      Value y = attribute_of(x, to_str(attr));
      out.push_back(y.is_undefined() && !dflt.is_undefined() ? dflt : y);
    }
    return Value::array(std::move(out));
  }
  if (a.pos.empty()) throw TemplateError("map needs a filter name or attribute=");
  const std::string& name = as_string(a.pos[0], "the filter name");
  FilterFn f = find_filter(name);
  if (f == nullptr) throw TemplateError("no filter named '" + name + "'");
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& x : iterate(v)) {
    Args call = rest;
    out.push_back(f(x, call));
  }
  return Value::array(std::move(out));
}

Value f_unique(const Value& v, Args& a) {
  a.expect("unique", 2, {"case_sensitive", "attribute"});
  Array out;
  for (const Value& x : iterate(v))
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
  return Value::array(std::move(out));
}

Value f_reverse(const Value& v, Args& a) {
  a.expect("reverse", 0);
  if (v.is_string()) {
    auto cps = code_points(v.s);
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::string(std::move(out));
  }
  Array items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::array(std::move(items));
}

Value f_sort(const Value& v, Args& a) {
  a.expect("sort", 3, {"reverse", "case_sensitive", "attribute"});
  const bool rev = truthy(a.get(0, "reverse", Value::boolean(false)));
  const bool cs = truthy(a.get(1, "case_sensitive", Value::boolean(false)));
  const Value attr = a.get(2, "attribute", Value::none());
  Array items = iterate(v);
  auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : attribute_of(x, to_str(attr)), cs); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare(key(x), key(y));
    return rev ? c > 0 : c < 0;
  });
  return Value::array(std::move(items));
}

Value f_safe(const Value& v, Args& a) {
  a.expect("safe", 0);
  return v;
}

Value f_escape(const Value& v, Args& a) {
  a.expect("escape", 0);
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(std::move(out));
}

Value f_indent(const Value& v, Args& a) {
  a.expect("indent", 3, {"width", "first", "blank"});
  const Value w = a.get(0, "width", Value::integer(4));
  const std::string pad =
      w.is_string() ? w.s : std::string(static_cast<size_t>(as_int(w, "indent's width")), ' ');
  const bool first = truthy(a.get(1, "first", Value::boolean(false)));
  const bool blank = truthy(a.get(2, "blank", Value::boolean(false)));
  const std::string s = to_str(v);
  std::string out;
  size_t k = 0;
  bool line0 = true;
  while (true) {
    const size_t nl = s.find('\n', k);
    const std::string line = s.substr(k, nl == std::string::npos ? std::string::npos : nl - k);
    const bool pad_it = line0 ? first : (blank || !strip(line, kWhitespace, true, true).empty());
    out += (pad_it ? pad : "") + line;
    if (nl == std::string::npos) break;
    out += '\n';
    k = nl + 1;
    line0 = false;
  }
  return Value::string(std::move(out));
}

Value f_wordcount(const Value& v, Args& a) {
  a.expect("wordcount", 0);
  return Value::integer(static_cast<int64_t>(split(to_str(v), nullptr, -1, false).size()));
}

Value extreme(const Value& v, Args& a, bool want_max) {
  a.expect(want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  const bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  const Value attr = a.get(1, "attribute", Value::none());
  Array items = iterate(v);
  if (items.empty()) return Value::undefined("no items");
  auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : attribute_of(x, to_str(attr)), cs); };
  Value best = items[0];
  for (const Value& x : items)
    if (int c = compare(key(x), key(best)); want_max ? c > 0 : c < 0) best = x;
  return best;
}

Value f_max(const Value& v, Args& a) {
  return extreme(v, a, true);
}
Value f_min(const Value& v, Args& a) {
  return extreme(v, a, false);
}

Value f_sum(const Value& v, Args& a) {
  a.expect("sum", 2, {"attribute", "start"});
  const Value attr = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value::integer(0));
  for (const Value& x : iterate(v)) {
    const Value y = attr.is_none() ? x : attribute_of(x, to_str(attr));
    if (total.is_integral() && y.is_integral())
      total = Value::integer(total.i + y.i);
    else
      total = Value::floating(as_double(total) + as_double(y));
  }
  return total;
}

Value f_attr(const Value& v, Args& a) {
  a.expect("attr", 1);
  return get_attr(v, as_string(a.get(0, ""), "attr's name"));
}

Value f_body(const Value& v, Args&) {
  return v;
}  // `{% filter %}`'s placeholder never runs

bool t_defined(const Value& v, Args&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, Args&) {
  return v.is_undefined();
}
bool t_none(const Value& v, Args&) {
  return v.is_none();
}
bool t_string(const Value& v, Args&) {
  return v.is_string();
}
bool t_number(const Value& v, Args&) {
  return v.is_number();
}
bool t_integer(const Value& v, Args&) {
  return v.kind == Value::Kind::integer;
}
bool t_float(const Value& v, Args&) {
  return v.kind == Value::Kind::floating;
}
bool t_boolean(const Value& v, Args&) {
  return v.kind == Value::Kind::boolean;
}
bool t_true(const Value& v, Args&) {
  return v.kind == Value::Kind::boolean && v.b;
}
bool t_false(const Value& v, Args&) {
  return v.kind == Value::Kind::boolean && !v.b;
}
bool t_mapping(const Value& v, Args&) {
  return v.is_object();
}
bool t_iterable(const Value& v, Args&) {
  return v.is_string() || v.is_array() || v.is_object();
}
bool t_sequence(const Value& v, Args&) {
  return v.is_string() || v.is_array() || v.is_object();
}
bool t_callable(const Value& v, Args&) {
  return v.kind == Value::Kind::function;
}
bool t_odd(const Value& v, Args&) {
  return (as_int(v, "odd's value") % 2 + 2) % 2 == 1;
}
bool t_even(const Value& v, Args&) {
  return as_int(v, "even's value") % 2 == 0;
}
bool t_divisibleby(const Value& v, Args& a) {
  const int64_t d = as_int(a.get(0, "num"), "divisibleby's divisor");
  if (d == 0) throw TemplateError("integer division or modulo by zero");
  return as_int(v, "divisibleby's value") % d == 0;
}
bool t_eq(const Value& v, Args& a) {
  return equal(v, a.get(0, "other"));
}
bool t_ne(const Value& v, Args& a) {
  return !equal(v, a.get(0, "other"));
}
bool t_lt(const Value& v, Args& a) {
  return compare(v, a.get(0, "other")) < 0;
}
bool t_le(const Value& v, Args& a) {
  return compare(v, a.get(0, "other")) <= 0;
}
bool t_gt(const Value& v, Args& a) {
  return compare(v, a.get(0, "other")) > 0;
}
bool t_ge(const Value& v, Args& a) {
  return compare(v, a.get(0, "other")) >= 0;
}
bool t_in(const Value& v, Args& a) {
  return contains(a.get(0, "seq"), v);
}
bool t_sameas(const Value& v, Args& a) {
  const Value o = a.get(0, "other");
  if (v.is_array() && o.is_array()) return v.a == o.a;
  if (v.is_object() && o.is_object()) return v.o == o.o;
  return v.kind == o.kind && (v.kind == Value::Kind::none || v.kind == Value::Kind::undefined ||
                              (v.kind == Value::Kind::boolean && v.b == o.b));
}
bool t_lower(const Value& v, Args&) {
  return v.is_string() && change_case(v.s, "lower") == v.s;
}
bool t_upper(const Value& v, Args&) {
  return v.is_string() && change_case(v.s, "upper") == v.s;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::map<std::string, FilterFn, std::less<>> filters = {
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"length", f_length},
      {"count", f_length},
      {"upper", f_case<0>},
      {"lower", f_case<1>},
      {"title", f_case<2>},
      {"capitalize", f_case<3>},
      {"replace", f_replace},
      {"join", f_join},
      {"default", f_default},
      {"d", f_default},
      {"first", f_first},
      {"last", f_last},
      {"list", f_list},
      {"string", f_string},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"round", f_round},
      {"items", f_items},
      {"dictsort", f_dictsort},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"map", f_map},
      {"unique", f_unique},
      {"reverse", f_reverse},
      {"sort", f_sort},
      {"safe", f_safe},
      {"escape", f_escape},
      {"e", f_escape},
      {"indent", f_indent},
      {"wordcount", f_wordcount},
      {"max", f_max},
      {"min", f_min},
      {"sum", f_sum},
      {"attr", f_attr},
      {"__body__", f_body},
  };
  const auto it = filters.find(name);
  return it == filters.end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  static const std::map<std::string, TestFn, std::less<>> tests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
  };
  const auto it = tests.find(name);
  return it == tests.end() ? nullptr : it->second;
}

}  // namespace chorus::jinja
