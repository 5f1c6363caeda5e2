#include "engine/grammar/json_schema.h"

#include "engine/grammar/json_pattern.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <cmath>
#include <nlohmann/json.hpp>

namespace chorus {

namespace {

using json = nlohmann::ordered_json;  // a schema's properties in the order it writes them
using B = GrammarBuilder;
using Seq = GrammarBuilder::Seq;

constexpr int kMaxWhitespace = 16;
constexpr int kMaxIntDigits = 16;
constexpr int kMaxDepth = 64;
constexpr int kMaxCalls = 8;  // calls in one reply, with parallel tool calls

const std::set<std::string> kAnnotations = {"title",       "description", "default",  "examples",
                                            "$schema",     "$id",         "$comment", "$defs",
                                            "definitions", "deprecated",  "readOnly", "writeOnly"};
const std::set<std::string> kHandled = {"type",
                                        "enum",
                                        "const",
                                        "anyOf",
                                        "allOf",
                                        "$ref",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "items",
                                        "minItems",
                                        "maxItems",
                                        "minLength",
                                        "maxLength",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        "format",
                                        "pattern"};

// Decimal digit strings of one length, x..y (x <= y, both that long, leading zeros allowed): the
// alternatives of a byte sequence, one digit set per position.
void digit_range(const std::string& x, const std::string& y, Seq prefix, std::vector<Seq>& out) {
  if (x.empty()) {
    out.push_back(std::move(prefix));
    return;
  }
  auto with = [&](uint8_t lo, uint8_t hi) {
    Seq p = prefix;
    p.push_back(B::bytes(B::range(lo, hi)));
    return p;
  };
  const std::string rx = x.substr(1), ry = y.substr(1);
  const std::string zeros(rx.size(), '0'), nines(rx.size(), '9');
  if (x == std::string(x.size(), '0') && y == std::string(y.size(), '9')) {  // every string of that length
    for (size_t i = 0; i < x.size(); ++i) prefix.push_back(B::bytes(B::range('0', '9')));
    out.push_back(std::move(prefix));
    return;
  }
  if (x[0] == y[0]) return digit_range(rx, ry, with(x[0], x[0]), out);
  // The first digit x0 with the rest from rx up, the digits between with any rest, y0 with the
  // rest up to ry; a rest that is already every string joins the digits between.
  const uint8_t lo = rx == zeros ? x[0] : x[0] + 1, hi = ry == nines ? y[0] : y[0] - 1;
  if (rx != zeros) digit_range(rx, nines, with(x[0], x[0]), out);
  if (lo <= hi) digit_range(zeros, nines, with(lo, hi), out);
  if (ry != nines) digit_range(zeros, ry, with(y[0], y[0]), out);
}

// The natural numbers lo..hi (0 <= lo <= hi) as JSON writes them (no leading zero).
std::vector<Seq> naturals(int64_t lo, int64_t hi) {
  std::vector<Seq> out;
  const std::string a = std::to_string(lo), b = std::to_string(hi);
  for (size_t len = a.size(); len <= b.size(); ++len) {
    const std::string from = len == a.size() ? a : "1" + std::string(len - 1, '0');
    const std::string to = len == b.size() ? b : std::string(len, '9');
    digit_range(from, to, {}, out);
  }
  return out;
}

Seq cat(std::initializer_list<Seq> parts) {
  Seq out;
  for (const Seq& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Seq r(int32_t rule) {
  return {B::ref(rule)};
}

// The JSON pieces every schema's grammar shares, made once per grammar.
struct Lexicon {
  int32_t ws = -1, string = -1, chr = -1, integer = -1, number = -1, boolean = -1, null = -1, value = -1,
          object = -1, array = -1;

  explicit Lexicon(B& b) {
    ws = b.repeat("ws", {B::bytes(B::range(' ', ' ') | B::range('\t', '\t') | B::range('\n', '\n'))}, 0,
                  kMaxWhitespace);
    const ByteSet cont = B::range(0x80, 0xBF),
                  hex = B::range('0', '9') | B::range('a', 'f') | B::range('A', 'F');
    const ByteSet plain = B::range(0x20, 0x21) | B::range(0x23, 0x5B) | B::range(0x5D, 0x7F);
    const int32_t escape =
        b.add("escape",
              {{B::bytes(B::range('"', '"') | B::range('\\', '\\') | B::range('/', '/') | B::range('b', 'b') |
                         B::range('f', 'f') | B::range('n', 'n') | B::range('r', 'r') | B::range('t', 't'))},
               // \uXXXX but the surrogates D800-DFFF (a lone one is not a character)
               {B::byte('u'), B::bytes(B::range('0', '9') | B::range('a', 'c') | B::range('A', 'C')),
                B::bytes(hex), B::bytes(hex), B::bytes(hex)},
               {B::byte('u'), B::bytes(B::range('d', 'd') | B::range('D', 'D')), B::bytes(B::range('0', '7')),
                B::bytes(hex), B::bytes(hex)},
               {B::byte('u'), B::bytes(B::range('e', 'f') | B::range('E', 'F')), B::bytes(hex), B::bytes(hex),
                B::bytes(hex)}});
    // One character: printable ASCII but " and \, an escape, or a well-formed UTF-8 sequence.
    chr = b.add("char",
                {{B::bytes(plain)},
                 {B::byte('\\'), B::ref(escape)},
                 {B::bytes(B::range(0xC2, 0xDF)), B::bytes(cont)},
                 {B::byte(0xE0), B::bytes(B::range(0xA0, 0xBF)), B::bytes(cont)},
                 {B::bytes(B::range(0xE1, 0xEC) | B::range(0xEE, 0xEF)), B::bytes(cont), B::bytes(cont)},
                 {B::byte(0xED), B::bytes(B::range(0x80, 0x9F)), B::bytes(cont)},
                 {B::byte(0xF0), B::bytes(B::range(0x90, 0xBF)), B::bytes(cont), B::bytes(cont)},
                 {B::bytes(B::range(0xF1, 0xF3)), B::bytes(cont), B::bytes(cont), B::bytes(cont)},
                 {B::byte(0xF4), B::bytes(B::range(0x80, 0x8F)), B::bytes(cont), B::bytes(cont)}});
    string = string_of(b, "string", 0, -1);
    const ByteSet digit = B::range('0', '9');
    const int32_t digits = b.repeat("int-digits", {B::bytes(digit)}, 0, kMaxIntDigits - 1);
    const int32_t natural =
        b.add("natural", {B::literal("0"), {B::bytes(B::range('1', '9')), B::ref(digits)}});
    integer = b.add("integer", {cat({B::literal("-"), r(natural)}), r(natural)});
    const int32_t frac =
        b.add("fraction", {cat({B::literal("."), r(b.repeat("frac-digits", {B::bytes(digit)}, 1, 16))}), {}});
    const int32_t exp = b.add("exponent", {{B::bytes(B::range('e', 'e') | B::range('E', 'E')),
                                            B::ref(b.add("exp-sign", {B::literal("-"), B::literal("+"), {}})),
                                            B::ref(b.repeat("exp-digits", {B::bytes(digit)}, 1, 2))},
                                           {}});
    number = b.add("number", {{B::ref(integer), B::ref(frac), B::ref(exp)}});
    boolean = b.add("boolean", {B::literal("true"), B::literal("false")});
    null = b.add("null", {B::literal("null")});
    value = b.declare("value");
    const int32_t member = b.add("member", {cat({r(string), r(ws), B::literal(":"), r(ws), r(value)})});
    object =
        b.add("object",
              {cat({B::literal("{"), r(ws), r(list(b, "members", member, 0, -1)), r(ws), B::literal("}")})});
    array =
        b.add("array",
              {cat({B::literal("["), r(ws), r(list(b, "elements", value, 0, -1)), r(ws), B::literal("]")})});
    b.define(value, {r(object), r(array), r(string), r(number), r(boolean), r(null)});
  }

  int32_t string_of(B& b, const std::string& name, int64_t min, int64_t max) const {
    const int32_t chars = b.repeat(name + "-chars", r(chr), min, max);
    return b.add(name, {cat({B::literal("\""), r(chars), B::literal("\"")})});
  }

  // min..max items separated by commas (max < 0: no bound), possibly none.
  int32_t list(B& b, const std::string& name, int32_t item, int64_t min, int64_t max) const {
    const Seq more = cat({r(ws), B::literal(","), r(ws), r(item)});
    std::vector<Seq> alts;
    if (min <= 0) alts.push_back({});
    if (max != 0) {
      const int32_t rest =
          b.repeat(name + "-rest", more, std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1);
      alts.push_back({B::ref(item), B::ref(rest)});
    }
    return b.add(name, std::move(alts));
  }
};

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(&root), lex_(b_) {}

  Result<Grammar> run() {
    const int32_t top = compile(*root_, "");
    if (err_) return *err_;
    // Whitespace may lead but not trail: once the value is closed, the end is the only token.
    const int32_t start = b_.add("root", {{B::ref(lex_.ws), B::ref(top)}});
    auto g = b_.build(start);
    if (!g) return make_error(Errc::invalid_argument, "JSON schema: " + g.error().message);
    return g;
  }

  Result<Grammar> run_tool_calls(const json& tools, bool required, bool parallel) {
    const json none = json::object();
    if (!tools.is_array() || tools.empty()) return make_error(Errc::invalid_argument, "tool calls: no tools");
    std::vector<Seq> calls;
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
        return make_error(Errc::invalid_argument, "tool calls: tool " + std::to_string(i) + " has no name");
      const std::string name = t["name"];
      if (!names.insert(name).second)
        return make_error(Errc::invalid_argument, "tool calls: two tools are named '" + name + "'");
      const bool has = t.contains("parameters") && !t["parameters"].is_null();
      root_ = has ? &t["parameters"] : &none;
      refs_.clear();  // each tool's $refs point into its own schema
      const int32_t args = has ? compile(*root_, "") : lex_.object;
      if (err_) return make_error(Errc::invalid_argument, "tool '" + name + "': " + err_->message);
      // One spelling of the wrapper, the one chat templates (Hermes, Qwen) and chorus's own tool
      // prompt write back for a call in the history: the reply's text is then the prefix the next
      // turn's prompt starts with, and the program's block is reused (gateway/tool_calls.h).
      calls.push_back(cat({B::literal("<tool_call>\n{\"name\": " + json(name).dump() + ", \"arguments\": "),
                           r(args), B::literal("}\n</tool_call>")}));
    }
    ByteSet text;
    text.set();
    text.reset('<');
    const int32_t call = b_.add("call", std::move(calls));
    int32_t root;
    if (required) {  // calls only: one, or with parallel up to kMaxCalls, apart by whitespace
      if (parallel) {
        const int32_t more = b_.repeat("more calls", cat({B::literal("\n"), r(call)}), 0, kMaxCalls - 1);
        root = b_.add("root", {{B::ref(call), B::ref(more)}});
      } else {
        root = b_.add("root", {{B::ref(call)}});
      }
    } else {
      const int32_t free = b_.repeat("text", {B::bytes(text)}, 0, -1);
      root = b_.add("root", {{B::ref(free)}, {B::ref(free), B::ref(call)}});
    }
    auto g = b_.build(root);
    if (!g) return make_error(Errc::invalid_argument, "tool calls: " + g.error().message);
    return g;
  }

 private:
  int32_t fail(const std::string& where, const std::string& what) {
    if (!err_) err_ = make_error(Errc::invalid_argument, "JSON schema at '#" + where + "': " + what);
    return lex_.null;
  }

  int32_t compile(const json& s, const std::string& at) {
    if (err_) return lex_.null;
    if (depth_ >= kMaxDepth)
      return fail(at, "nested more than " + std::to_string(kMaxDepth) + " schemas deep");
    ++depth_;
    const int32_t rule = compile_at_depth(s, at);
    --depth_;
    return rule;
  }

  int32_t compile_at_depth(const json& s, const std::string& at) {
    if (s.is_boolean()) return s.get<bool>() ? lex_.value : fail(at, "'false' accepts nothing");
    if (!s.is_object()) return fail(at, "a schema is an object or a boolean");
    for (const auto& [k, v] : s.items())
      if (!kAnnotations.count(k) && !kHandled.count(k))
        return fail(at, "keyword '" + k + "' is not supported (docs/structured-output.md lists what is)");
    if (s.contains("$ref")) {
      if (s.size() > 1)
        for (const auto& [k, v] : s.items())
          if (k != "$ref" && kHandled.count(k)) return fail(at, "'$ref' beside '" + k + "' is not supported");
      return reference(s["$ref"], at);
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1 || s.size() > 1 + annotations_in(s))
        return fail(at, "'allOf' is supported with exactly one schema and nothing beside it");
      return compile(all[0], at + "/allOf/0");
    }
    if (s.contains("anyOf")) {
      const json& any = s["anyOf"];
      if (!any.is_array() || any.empty()) return fail(at + "/anyOf", "a non-empty list of schemas");
      for (const auto& [k, v] : s.items())
        if (k != "anyOf" && kHandled.count(k)) return fail(at, "'anyOf' beside '" + k + "' is not supported");
      std::vector<Seq> alts;
      for (size_t i = 0; i < any.size(); ++i)
        alts.push_back(r(compile(any[i], at + "/anyOf/" + std::to_string(i))));
      return b_.add(at + "/anyOf", std::move(alts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return fail(at + "/type", "a type name or a list of them");
          types.push_back(x.get<std::string>());
        }
      } else {
        return fail(at + "/type", "a type name or a list of them");
      }
      for (const std::string& x : types)
        if (x != "object" && x != "array" && x != "string" && x != "number" && x != "integer" &&
            x != "boolean" && x != "null")
          return fail(at + "/type", "unknown type '" + x + "'");
    }
    if (s.contains("const")) return literals(json::array({s["const"]}), types, at + "/const");
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) return fail(at + "/enum", "a list of values");
      return literals(s["enum"], types, at + "/enum");
    }
    if (types.empty()) {  // the kind from the keywords, else any value
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
        types.push_back("object");
      else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems"))
        types.push_back("array");
      else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format") ||
               s.contains("pattern"))
        types.push_back("string");
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum"))
        types.push_back("number");
      else
        return lex_.value;
    }
    std::vector<Seq> alts;
    for (const std::string& t : types) alts.push_back(r(typed(s, t, at)));
    return alts.size() == 1 ? alts[0][0].rule : b_.add(at + "/type", std::move(alts));
  }

  static size_t annotations_in(const json& s) {
    size_t n = 0;
    for (const auto& [k, v] : s.items()) n += kAnnotations.count(k);
    return n;
  }

  int32_t typed(const json& s, const std::string& t, const std::string& at) {
    if (t == "object") return object(s, at);
    if (t == "array") return array(s, at);
    if (t == "string") {
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) return fail(at + "/pattern", "a regular expression");
        if (s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
          return fail(at, "'pattern' beside 'format', 'minLength' or 'maxLength' is not supported");
        std::string why;
        const int32_t rule =
            pattern_grammar(b_, lex_.chr, s["pattern"].get<std::string>(), at + "/pattern", &why);
        return why.empty() ? rule : fail(at + "/pattern", why);
      }
      if (s.contains("format")) {
        if (!s["format"].is_string()) return fail(at + "/format", "a format name");
        if (s.contains("minLength") || s.contains("maxLength"))
          return fail(at, "'format' beside 'minLength' or 'maxLength' is not supported");
        return formatted(s["format"].get<std::string>(), at);
      }
      const auto min = count(s, "minLength", at), max = count(s, "maxLength", at);
      if (min < 0 && max < 0) return lex_.string;
      if (max >= 0 && min > max) return fail(at, "minLength is more than maxLength");
      return lex_.string_of(b_, at + "/string", std::max<int64_t>(min, 0), max);
    }
    if (t == "number" || t == "integer") return bounded(s, t == "integer", at);
    if (t == "boolean") return lex_.boolean;
    return lex_.null;
  }

  // An integer, or a number, within minimum / maximum / exclusiveMinimum / exclusiveMaximum.
  // Integers: any bounds (the grammar writes at most kMaxIntDigits digits). Numbers: whole-number
  // bounds with the lower one at 0 or above (what Field(ge=0, le=1) makes), no exponent.
  int32_t bounded(const json& s, bool integer, const std::string& at) {
    const char* keys[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    bool any = false;
    for (const char* k : keys) {
      if (!s.contains(k)) continue;
      if (!s[k].is_number()) return fail(at + "/" + k, "a number");
      any = true;
    }
    if (!any) return integer ? lex_.integer : lex_.number;
    const double big = 9999999999999999.0;  // kMaxIntDigits nines
    double lo = -big, hi = big;
    bool lo_open = false, hi_open = false;
    if (s.contains("minimum")) lo = s["minimum"].get<double>();
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].get<double>() >= lo)
      lo = s["exclusiveMinimum"].get<double>(), lo_open = true;
    if (s.contains("maximum")) hi = s["maximum"].get<double>();
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].get<double>() <= hi)
      hi = s["exclusiveMaximum"].get<double>(), hi_open = true;
    if (lo > big || hi < -big) return fail(at, "no value of at most 16 digits lies between its bounds");
    lo = std::max(lo, -big), hi = std::min(hi, big);
    if (integer) {
      auto first = static_cast<int64_t>(std::ceil(lo)), last = static_cast<int64_t>(std::floor(hi));
      if (lo_open && static_cast<double>(first) == lo) ++first;
      if (hi_open && static_cast<double>(last) == hi) --last;
      if (first > last) return fail(at, "no integer lies between its bounds");
      std::vector<Seq> alts;
      if (first < 0)
        for (Seq& q : naturals(std::max<int64_t>(1, last < 0 ? -last : 1), -first))
          alts.push_back(cat({B::literal("-"), q}));
      if (last >= 0)
        for (Seq& q : naturals(std::max<int64_t>(first, 0), last)) alts.push_back(std::move(q));
      return b_.add(at + "/integer-range", std::move(alts));
    }
    if (lo < 0 || lo != std::floor(lo) || (hi != big && hi != std::floor(hi)))
      return fail(at,
                  "bounds on a number are supported when they are whole numbers, the lower one 0 or more");
    // N.F: N from lo (lo + 1 when lo is open and F is zero: so any N > lo with any F, or N = lo
    // with a fraction that is not all zeros) up to hi - 1 with any F, or hi itself (closed) with
    // a zero fraction.
    const auto first = static_cast<int64_t>(lo), last = static_cast<int64_t>(hi);
    const int32_t digits = b_.repeat(at + "/fraction-digits", {B::bytes(B::range('0', '9'))}, 1, 15);
    const int32_t zeros = b_.repeat(at + "/zero-digits", {B::bytes(B::range('0', '0'))}, 1, 15);
    const int32_t any_fraction = b_.add(at + "/fraction", {cat({B::literal("."), r(digits)}), {}});
    const int32_t nonzero_fraction =  // digits with a non-zero one among them
        b_.add(at + "/nonzero-fraction",
               {cat({B::literal("."),
                     r(b_.repeat(at + "/lead-zeros", {B::bytes(B::range('0', '0'))}, 0, 14)),
                     {B::bytes(B::range('1', '9'))},
                     r(b_.repeat(at + "/tail-digits", {B::bytes(B::range('0', '9'))}, 0, 14))})});
    const int32_t zero_fraction = b_.add(at + "/zero-fraction", {cat({B::literal("."), r(zeros)}), {}});
    std::vector<Seq> alts;
    auto add_range = [&](int64_t a, int64_t b, int32_t fraction) {
      if (a > b) return;
      for (Seq& q : naturals(a, b)) alts.push_back(cat({q, r(fraction)}));
    };
    add_range(lo_open ? first + 1 : first, last - 1, any_fraction);
    if (lo_open && first <= last - 1) add_range(first, first, nonzero_fraction);
    if (!hi_open) add_range(last, last, zero_fraction);
    if (lo_open && !hi_open && first == last) alts.clear();
    if (alts.empty()) return fail(at, "no number lies between its bounds");
    return b_.add(at + "/number-range", std::move(alts));
  }

  // A string of a `format` chorus writes exactly: date, time, date-time (RFC 3339), uuid, email,
  // ipv4. The dates are real ones (February to the 28th, the 30-day months to the 30th).
  int32_t formatted(const std::string& f, const std::string& at) {
    const ByteSet digit = B::range('0', '9');
    auto d = [&](uint8_t lo, uint8_t hi) { return B::bytes(B::range(lo, hi)); };
    auto two = [&](int lo, int hi) {  // a two-digit number lo..hi
      std::vector<Seq> alts;
      for (int v = lo; v <= hi; ++v) alts.push_back({B::byte('0' + v / 10), B::byte('0' + v % 10)});
      return alts;
    };
    auto rule = [&](const std::string& name, std::vector<Seq> alts) {
      return b_.add(at + "/" + name, std::move(alts));
    };
    auto date = [&] {
      std::vector<Seq> md;
      for (int m = 1; m <= 12; ++m) {
        const int days = m == 2 ? 28 : (m == 4 || m == 6 || m == 9 || m == 11) ? 30 : 31;
        for (Seq& day : two(1, days))
          md.push_back(cat({{B::byte('0' + m / 10), B::byte('0' + m % 10)}, B::literal("-"), day}));
      }
      return rule("date", {cat({{d('1', '2'), B::bytes(digit), B::bytes(digit), B::bytes(digit)},
                                B::literal("-"),
                                r(rule("month-day", md))})});
    };
    auto time = [&] {
      const int32_t h = rule("hour", two(0, 23)), m = rule("minute", two(0, 59));
      const int32_t frac =
          rule("second-fraction",
               {cat({B::literal("."), r(b_.repeat(at + "/second-digits", {B::bytes(digit)}, 1, 9))}), {}});
      const int32_t offset =
          rule("offset", {B::literal("Z"), cat({{d('+', '+')}, r(h), B::literal(":"), r(m)}),
                          cat({B::literal("-"), r(h), B::literal(":"), r(m)})});
      return rule("time", {cat({r(h), B::literal(":"), r(m), B::literal(":"), r(m), r(frac), r(offset)})});
    };
    int32_t inner = -1;
    if (f == "date")
      inner = date();
    else if (f == "time")
      inner = time();
    else if (f == "date-time")
      inner = rule("date-time", {cat({r(date()), B::literal("T"), r(time())})});
    else if (f == "uuid") {
      const ByteSet hex = B::range('0', '9') | B::range('a', 'f');
      Seq q;
      for (int n : {8, 4, 4, 4, 12}) {
        if (!q.empty()) q.push_back(B::byte('-'));
        for (int i = 0; i < n; ++i) q.push_back(B::bytes(hex));
      }
      inner = rule("uuid", {q});
    } else if (f == "email") {
      const ByteSet local = B::range('a', 'z') | B::range('A', 'Z') | B::range('0', '9') |
                            B::range('.', '.') | B::range('_', '_') | B::range('+', '+') | B::range('-', '-');
      const ByteSet label = B::range('a', 'z') | B::range('A', 'Z') | B::range('0', '9') | B::range('-', '-');
      const int32_t part = b_.repeat(at + "/email-label", {B::bytes(label)}, 1, 32);
      inner =
          rule("email",
               {cat({r(b_.repeat(at + "/email-local", {B::bytes(local)}, 1, 32)), B::literal("@"), r(part),
                     r(b_.repeat(at + "/email-domain", cat({B::literal("."), r(part)}), 1, 4))})});
    } else if (f == "ipv4") {
      const int32_t octet = rule("octet", naturals(0, 255));
      inner = rule(
          "ipv4",
          {cat({r(octet), B::literal("."), r(octet), B::literal("."), r(octet), B::literal("."), r(octet)})});
    } else {
      return fail(at + "/format",
                  "format '" + f + "' is not supported (date, time, date-time, uuid, email, ipv4 are)");
    }
    return b_.add(at + "/formatted", {cat({B::literal("\""), r(inner), B::literal("\"")})});
  }

  // A non-negative integer keyword, or -1 when absent.
  int64_t count(const json& s, const char* key, const std::string& at) {
    if (!s.contains(key)) return -1;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      fail(at + "/" + key, "a non-negative integer");
      return -1;
    }
    return v.get<int64_t>();
  }

  int32_t object(const json& s, const std::string& at) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return fail(at + "/properties", "an object of schemas");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail(at + "/required", "a list of property names");
      for (const json& n : s["required"]) {
        if (!n.is_string()) return fail(at + "/required", "a list of property names");
        if (!props.contains(n.get<std::string>()))
          return fail(at + "/required", "required property '" + n.get<std::string>() +
                                            "' is not in 'properties' (not supported)");
        required.insert(n.get<std::string>());
      }
    }
    bool extra = true;
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!a.is_boolean())
        return fail(at + "/additionalProperties", "a schema here is not supported: only true or false");
      extra = a.get<bool>();
    }
    if (props.empty()) {
      if (extra) return lex_.object;
      return b_.add(at + "/object", {cat({B::literal("{"), r(lex_.ws), B::literal("}")})});
    }
    // With `n` properties: first[i] is the rest from property i when none is written yet,
    // after[i] when one is (so a comma comes first).
    std::vector<std::pair<std::string, const json*>> list;
    for (const auto& [k, v] : props.items()) list.emplace_back(k, &v);
    // The properties in the order the schema writes them (ordered_json keeps it): a reply's keys
    // come in that order, so a schema that puts `reasoning` before `answer` gets it first.
    const size_t n = list.size();
    std::vector<int32_t> first(n + 1), after(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      first[i] = b_.declare(at + "/props-" + std::to_string(i));
      after[i] = b_.declare(at + "/props-more-" + std::to_string(i));
    }
    b_.define(first[n], {{}});
    b_.define(after[n], {{}});
    for (size_t i = n; i-- > 0;) {
      const std::string& key = list[i].first;
      const int32_t value = compile(*list[i].second, at + "/properties/" + key);
      const Seq kv = cat({B::literal(json(key).dump()), r(lex_.ws), B::literal(":"), r(lex_.ws), r(value)});
      const Seq sep = cat({r(lex_.ws), B::literal(","), r(lex_.ws)});
      std::vector<Seq> f{cat({kv, r(after[i + 1])})}, a{cat({sep, kv, r(after[i + 1])})};
      if (!required.count(key)) {
        f.push_back(r(first[i + 1]));
        a.push_back(r(after[i + 1]));
      }
      b_.define(first[i], std::move(f));
      b_.define(after[i], std::move(a));
    }
    return b_.add(at + "/object",
                  {cat({B::literal("{"), r(lex_.ws), r(first[0]), r(lex_.ws), B::literal("}")})});
  }

  int32_t array(const json& s, const std::string& at) {
    const int32_t item = s.contains("items") ? compile(s["items"], at + "/items") : lex_.value;
    const auto min = count(s, "minItems", at), max = count(s, "maxItems", at);
    if (max >= 0 && min > max) return fail(at, "minItems is more than maxItems");
    const int32_t items = lex_.list(b_, at + "/items-list", item, std::max<int64_t>(min, 0), max);
    return b_.add(at + "/array", {cat({B::literal("["), r(lex_.ws), r(items), r(lex_.ws), B::literal("]")})});
  }

  int32_t literals(const json& values, const std::vector<std::string>& types, const std::string& at) {
    std::vector<Seq> alts;
    for (const json& v : values)
      if (types.empty() || of_types(v, types)) alts.push_back(B::literal(v.dump()));
    if (alts.empty())
      return fail(at, "no value is allowed (the list is empty, or none has the schema's type)");
    return b_.add(at, std::move(alts));
  }

  static bool of_types(const json& v, const std::vector<std::string>& types) {
    for (const std::string& t : types) {
      if ((t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
          (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
          (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()))
        return true;
      if (t == "integer" && (v.is_number_integer() ||
                             (v.is_number_float() &&
                              v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))))
        return true;
    }
    return false;
  }

  int32_t reference(const json& ref, const std::string& at) {
    if (!ref.is_string()) return fail(at + "/$ref", "a string");
    const std::string path = ref.get<std::string>();
    if (path.empty() || path[0] != '#')
      return fail(at + "/$ref", "only references into the same document ('#...') are supported");
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(path.substr(1));
    } catch (const json::exception&) {
      return fail(at + "/$ref", "'" + path + "' is not a JSON pointer");
    }
    if (!root_->contains(ptr)) return fail(at + "/$ref", "'" + path + "' points at nothing");
    const int32_t rule = b_.declare("ref " + path);
    refs_[path] = rule;  // before compiling, so that recursion refers to it
    const int32_t target = compile(root_->at(ptr), path.substr(1));
    b_.define(rule, {r(target)});
    return rule;
  }

  const json* root_;  // the document $refs point into
  B b_;
  Lexicon lex_;
  std::map<std::string, int32_t> refs_;
  std::optional<Error> err_;
  int depth_ = 0;
};

}  // namespace

Result<Grammar> json_schema_grammar(const json& schema) {
  return Compiler(schema).run();
}

Result<Grammar> tool_call_grammar(const json& tools) {
  const json empty = json::object();
  if (tools.is_object())
    return Compiler(empty).run_tool_calls(tools.value("tools", json::array()), tools.value("required", false),
                                          tools.value("parallel", false));
  return Compiler(empty).run_tool_calls(tools, false, false);
}

Grammar json_object_grammar() {
  B b;
  Lexicon lex(b);
  auto g = b.build(b.add("root", {{B::ref(lex.ws), B::ref(lex.object)}}));
  return std::move(*g);
}

}  // namespace chorus
