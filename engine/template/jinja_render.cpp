// The renderer: walks a parsed template with Python's semantics. Scopes as jinja2 has them: a
// for loop's body gets a fresh scope each iteration (a `set` inside does not outlive it; that
// is what namespace() is for), `if` opens none, a macro sees the template's top level only.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/template/jinja.h"
#include "engine/template/jinja_ast.h"
#include "engine/template/jinja_builtins.h"

namespace chorus {

namespace jinja {

namespace {

struct Frame {
  Object vars;
  const Frame* parent = nullptr;

  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent)
      for (const auto& [k, v] : f->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { normal, break_, continue_ };

Value arith(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
    if (a.is_array() && b.is_array()) {
      Array out = *a.a;
      out.insert(out.end(), b.a->begin(), b.a->end());
      return Value::array(std::move(out));
    }
  }
  if (op == "*" && (a.is_string() || a.is_array() || b.is_string() || b.is_array())) {
    const Value& seq = a.is_string() || a.is_array() ? a : b;
    const int64_t n = as_int(&seq == &a ? b : a, "a repeat count");
    if (n > 0 && static_cast<uint64_t>(n) * static_cast<uint64_t>(length(seq)) > (16u << 20))
      throw TemplateLimit("repetition longer than 16 MiB");
    Value out = seq.is_string() ? Value::string("") : Value::array();
    for (int64_t k = 0; k < n; ++k) {
      if (seq.is_string())
        out.s += seq.s;
      else
        out.a->insert(out.a->end(), seq.a->begin(), seq.a->end());
    }
    return out;
  }
  if (!a.is_number() || !b.is_number())
    throw TemplateError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                        type_name(b) + "'");
  const bool ints = a.is_integral() && b.is_integral();
  if (op == "+") return ints ? Value::integer(a.i + b.i) : Value::floating(as_double(a) + as_double(b));
  if (op == "-") return ints ? Value::integer(a.i - b.i) : Value::floating(as_double(a) - as_double(b));
  if (op == "*") return ints ? Value::integer(a.i * b.i) : Value::floating(as_double(a) * as_double(b));
  if (op == "/") {
    if (as_double(b) == 0) throw TemplateError("division by zero");
    return Value::floating(as_double(a) / as_double(b));
  }
  if (op == "//" || op == "%") {
    if (as_double(b) == 0) throw TemplateError("integer division or modulo by zero");
    if (ints) {
      int64_t q = a.i / b.i, r = a.i % b.i;
      if (r != 0 && ((r < 0) != (b.i < 0))) {
        --q;
        r += b.i;
      }
      return Value::integer(op == "//" ? q : r);
    }
    const double x = as_double(a), y = as_double(b);
    const double q = std::floor(x / y);
    return Value::floating(op == "//" ? q : x - q * y);
  }
  if (op == "**") {
    if (ints && b.i >= 0) {
      int64_t r = 1;
      for (int64_t k = 0; k < b.i && k < 64; ++k) r *= a.i;
      return Value::integer(r);
    }
    return Value::floating(std::pow(as_double(a), as_double(b)));
  }
  throw TemplateError("unknown operator " + op);
}

class Renderer {
 public:
  Renderer(const RenderLimits& limits, Frame& globals) : limits_(limits), globals_(globals) {}

  void run(const Body& body, Frame& frame, std::string& out) { (void)exec(body, frame, out); }

 private:
  void tick() {
    if (++steps_ > limits_.max_steps)
      throw TemplateLimit("the template ran more than " + std::to_string(limits_.max_steps) + " steps");
  }

  void emit(std::string& out, const std::string& s) {
    out += s;
    if (out.size() > limits_.max_output_bytes)
      throw TemplateLimit("the rendering is longer than " + std::to_string(limits_.max_output_bytes) +
                          " bytes");
  }

  Flow exec(const Body& body, Frame& frame, std::string& out) {
    for (const auto& s : body) {
      try {
        if (Flow f = exec(*s, frame, out); f != Flow::normal) return f;
      } catch (TemplateError& e) {
        if (e.line == 0) e.line = s->line;
        throw;
      }
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s, Frame& frame, std::string& out) {
    tick();
    switch (s.kind) {
      case Stmt::Kind::text: emit(out, s.text); return Flow::normal;
      case Stmt::Kind::output: emit(out, to_str(eval(*s.expr, frame))); return Flow::normal;
      case Stmt::Kind::if_:
        for (size_t k = 0; k < s.conditions.size(); ++k)
          if (truthy(eval(*s.conditions[k], frame))) return exec(s.bodies[k], frame, out);
        return exec(s.else_body, frame, out);
      case Stmt::Kind::for_: return exec_for(s, frame, out);
      case Stmt::Kind::set: exec_set(s, frame); return Flow::normal;
      case Stmt::Kind::set_block: {
        std::string text;
        (void)exec(s.body, frame, text);
        frame.set(s.targets[0], Value::string(std::move(text)));
        return Flow::normal;
      }
      case Stmt::Kind::macro: frame.set(s.name, make_macro(s)); return Flow::normal;
      case Stmt::Kind::filter: {
        std::string text;
        (void)exec(s.body, frame, text);
        Frame inner{{{"__body__", Value::string(std::move(text))}}, &frame};
        emit(out, to_str(eval(*s.expr, inner)));
        return Flow::normal;
      }
      case Stmt::Kind::break_: return Flow::break_;
      case Stmt::Kind::continue_: return Flow::continue_;
    }
    return Flow::normal;
  }

  static void bind(Frame& f, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      f.set(targets[0], v);
      return;
    }
    Array parts = iterate(v);
    if (parts.size() != targets.size())
      throw TemplateError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                          std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) f.set(targets[k], parts[k]);
  }

  Flow exec_for(const Stmt& s, Frame& frame, std::string& out) {
    const Value seq = eval(*s.expr, frame);
    if (seq.is_none()) throw TemplateError("'NoneType' object is not iterable");
    Array items = iterate(seq);
    if (s.loop_filter) {
      Array kept;
      for (const Value& x : items) {
        tick();
        Frame f{{}, &frame};
        bind(f, s.targets, x);
        if (truthy(eval(*s.loop_filter, f))) kept.push_back(x);
      }
      items = std::move(kept);
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      tick();
      Frame f{{}, &frame};
      f.set("loop", loop_object(items, k));
      bind(f, s.targets, items[static_cast<size_t>(k)]);
      if (exec(s.body, f, out) == Flow::break_) break;
    }
    if (n == 0) return exec(s.else_body, frame, out);
    return Flow::normal;
  }

  static Value loop_object(const Array& items, int64_t k) {
    const auto n = static_cast<int64_t>(items.size());
    Object o = {
        {"index", Value::integer(k + 1)},
        {"index0", Value::integer(k)},
        {"revindex", Value::integer(n - k)},
        {"revindex0", Value::integer(n - k - 1)},
        {"first", Value::boolean(k == 0)},
        {"last", Value::boolean(k == n - 1)},
        {"length", Value::integer(n)},
        {"depth", Value::integer(1)},
        {"depth0", Value::integer(0)},
        {"previtem",
         k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item")},
        {"nextitem",
         k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item")},
        {"cycle", Value::function([k](Args& a) {
           if (a.pos.empty()) throw TemplateError("no items for cycling given");
           return a.pos[static_cast<size_t>(k) % a.pos.size()];
         })},
    };
    return Value::object(std::move(o));
  }

  void exec_set(const Stmt& s, Frame& frame) {
    Value v = eval(*s.expr, frame);
    if (s.attr.empty()) {
      bind(frame, s.targets, v);
      return;
    }
    const Value* ns = frame.find(s.targets[0]);
    if (ns == nullptr || !ns->is_object() || !ns->is_namespace)
      throw TemplateError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    Value target = *ns;  // shares the namespace's attributes
    target.set(s.attr, std::move(v));
  }

  Value make_macro(const Stmt& s) {
    const Stmt* m = &s;
    return Value::function([this, m](Args& a) {
      if (a.pos.size() > m->params.size())
        throw TemplateError("macro '" + m->name + "' takes " + std::to_string(m->params.size()) +
                            " arguments");
      if (++depth_ > limits_.max_call_depth)
        throw TemplateLimit("macro calls nested more than " + std::to_string(limits_.max_call_depth) +
                            " deep");
      Frame f{{}, &globals_root()};
      for (size_t k = 0; k < m->params.size(); ++k) {
        Value v =
            k < a.pos.size() ? a.pos[k] : Value::undefined("parameter '" + m->params[k] + "' was not given");
        for (const auto& [name, x] : a.kw)
          if (name == m->params[k]) v = x;
        if (v.is_undefined() && m->defaults[k]) v = eval(*m->defaults[k], f);
        f.set(m->params[k], std::move(v));
      }
      for (const auto& [name, x] : a.kw)
        if (std::find(m->params.begin(), m->params.end(), name) == m->params.end())
          throw TemplateError("macro '" + m->name + "' has no parameter '" + name + "'");
      std::string text;
      (void)exec(m->body, f, text);
      --depth_;
      return Value::string(std::move(text));
    });
  }

 public:
  void set_root(Frame* root) { root_ = root; }

 private:
  const Frame& globals_root() const { return root_ != nullptr ? *root_ : globals_; }

  Args call_args(const Expr& e, size_t first, Frame& frame) {
    Args a;
    for (size_t k = first; k < e.items.size(); ++k) a.pos.push_back(eval(*e.items[k], frame));
    for (const auto& [name, x] : e.kwargs) a.kw.emplace_back(name, eval(*x, frame));
    return a;
  }

  Value eval(const Expr& e, Frame& frame) {
    try {
      return eval_inner(e, frame);
    } catch (TemplateError& err) {
      if (err.line == 0) err.line = e.line;
      throw;
    }
  }

  Value eval_inner(const Expr& e, Frame& frame) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: {
        if (const Value* v = frame.find(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::list: {
        Array a;
        for (const auto& x : e.items) a.push_back(eval(*x, frame));
        return e.name == "tuple" ? Value::tuple(std::move(a)) : Value::array(std::move(a));
      }
      case Expr::Kind::dict: return eval_dict(e, frame);
      case Expr::Kind::attr: return get_attr(eval(*e.items[0], frame), e.name);
      case Expr::Kind::index: return get_item(eval(*e.items[0], frame), eval(*e.items[1], frame));
      case Expr::Kind::slice: {
        auto part = [&](size_t k) { return e.items[k] ? eval(*e.items[k], frame) : Value::none(); };
        return get_slice(eval(*e.items[0], frame), part(1), part(2), part(3));
      }
      case Expr::Kind::call: return eval_call(e, frame);
      case Expr::Kind::filter: {
        const Value v = eval(*e.items[0], frame);
        Args a = call_args(e, 1, frame);
        return e.filter(v, a);
      }
      case Expr::Kind::test: {
        const Value v = eval(*e.items[0], frame);
        Args a = call_args(e, 1, frame);
        return Value::boolean(e.test(v, a) != e.negated);
      }
      case Expr::Kind::unary: return eval_unary(e, frame);
      case Expr::Kind::binary: {
        Value a = eval(*e.items[0], frame);
        if (e.name == "and") return truthy(a) ? eval(*e.items[1], frame) : a;
        if (e.name == "or") return truthy(a) ? a : eval(*e.items[1], frame);
        return arith(e.name, a, eval(*e.items[1], frame));
      }
      case Expr::Kind::compare: return eval_compare(e, frame);
      case Expr::Kind::condition:
        if (truthy(eval(*e.items[1], frame))) return eval(*e.items[0], frame);
        return e.items[2] ? eval(*e.items[2], frame)
                          : Value::undefined("the condition was false and there is no else");
    }
    return {};
  }

  Value eval_dict(const Expr& e, Frame& frame) {
    Value d = Value::object();
    for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
      const Value key = eval(*e.items[k], frame);
      if (!key.is_string()) throw TemplateError("dict keys must be strings here, got " + type_name(key));
      d.set(key.s, eval(*e.items[k + 1], frame));
    }
    return d;
  }

  Value eval_call(const Expr& e, Frame& frame) {
    const Value fn = eval(*e.items[0], frame);
    if (fn.kind != Value::Kind::function) {
      if (fn.is_undefined())
        throw TemplateError(fn.undefined_hint.empty() ? "call of an undefined value" : fn.undefined_hint);
      throw TemplateError("'" + type_name(fn) + "' object is not callable");
    }
    Args a = call_args(e, 1, frame);
    return (*fn.fn)(a);
  }

  Value eval_unary(const Expr& e, Frame& frame) {
    const Value v = eval(*e.items[0], frame);
    if (e.name == "not") return Value::boolean(!truthy(v));
    if (!v.is_number())
      throw TemplateError("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
    if (e.name == "+") return v.is_integral() ? Value::integer(v.i) : v;
    return v.is_integral() ? Value::integer(-v.i) : Value::floating(-v.f);
  }

  // A chain of comparisons (a < b <= c), each operand evaluated once, stopping at the first false.
  Value eval_compare(const Expr& e, Frame& frame) {
    Value left = eval(*e.items[0], frame);
    for (size_t k = 0; k < e.ops.size(); ++k) {
      Value right = eval(*e.items[k + 1], frame);
      const std::string& op = e.ops[k];
      bool ok;
      if (op == "==")
        ok = equal(left, right);
      else if (op == "!=")
        ok = !equal(left, right);
      else if (op == "in")
        ok = contains(right, left);
      else if (op == "not in")
        ok = !contains(right, left);
      else {
        const int c = compare(left, right);
        ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      }
      if (!ok) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  const RenderLimits& limits_;
  Frame& globals_;
  Frame* root_ = nullptr;
  size_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

}  // namespace jinja

Result<JinjaTemplate> JinjaTemplate::parse(std::string_view source) {
  try {
    JinjaTemplate t;
    t.program_ = jinja::parse_program(source);
    return t;
  } catch (const jinja::TemplateError& e) {
    return make_error(Errc::bad_format, "line " + std::to_string(e.line) + ": " + e.what());
  }
}

Result<std::string> JinjaTemplate::render(const nlohmann::ordered_json& vars,
                                          const RenderLimits& limits) const {
  if (!vars.is_object())
    return make_error(Errc::invalid_argument, "a template's variables must be a JSON object");
  using namespace jinja;
  Frame globals{global_functions(), nullptr};
  Frame root{{}, &globals};
  for (const auto& [k, v] : vars.items()) root.set(k, from_json(v));
  std::string out;
  try {
    Renderer r(limits, globals);
    r.set_root(&root);
    r.run(program_->body, root, out);
  } catch (const TemplateRaised& e) {
    return make_error(Errc::invalid_argument, e.what());
  } catch (const TemplateLimit& e) {
    return make_error(Errc::out_of_range, "line " + std::to_string(e.line) + ": " + e.what());
  } catch (const TemplateError& e) {
    return make_error(Errc::bad_format, "line " + std::to_string(e.line) + ": " + e.what());
  }
  return out;
}

}  // namespace chorus
