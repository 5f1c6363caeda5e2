// Jinja's grammar, by recursive descent, with jinja2's precedence (lowest first):
//   a if b else c | or | and | not | comparisons (== != < <= > >= in, not in) | + - | ~ |
//   * / // % | ** | unary - + | primary with .attr [index] (call) | filter and `is` test
#include <string_view>

#include "engine/template/jinja_ast.h"
#include "engine/template/jinja_lexer.h"

namespace chorus::jinja {

namespace {

bool is_keyword(const std::string& s) {
  static constexpr std::string_view kw[] = {"and", "or", "not", "in", "is", "if", "else", "elif", "endif"};
  for (std::string_view k : kw)
    if (s == k) return true;
  return false;
}

ExprPtr make(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

// The tokens of one tag.
class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, int line) : t_(tokens), line_(line) {}

  bool done() const { return k_ >= t_.size(); }
  const Token* peek(size_t ahead = 0) const { return k_ + ahead < t_.size() ? &t_[k_ + ahead] : nullptr; }
  bool at_op(std::string_view op, size_t ahead = 0) const {
    const Token* t = peek(ahead);
    return t != nullptr && t->kind == Token::Kind::op && t->text == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    const Token* t = peek(ahead);
    return t != nullptr && t->kind == Token::Kind::name && t->text == name;
  }
  bool accept_op(std::string_view op) {
    if (!at_op(op)) return false;
    ++k_;
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!at_name(name)) return false;
    ++k_;
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError(what, done() ? line_ : t_[k_].line);
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op))
      fail("expected '" + std::string(op) + "', got " +
           (done() ? "the end of the tag" : "'" + t_[k_].text + "'"));
  }
  std::string expect_name(std::string_view what) {
    const Token* t = peek();
    if (t == nullptr || t->kind != Token::Kind::name) fail("expected " + std::string(what));
    ++k_;
    return t->text;
  }
  void expect_end() {
    if (!done()) fail("unexpected '" + t_[k_].text + "' in a tag");
  }
  int line() const { return done() ? line_ : t_[k_].line; }
  std::vector<Token> rest() {
    std::vector<Token> out(t_.begin() + static_cast<std::ptrdiff_t>(k_), t_.end());
    k_ = t_.size();
    return out;
  }

  // expression: with `a if b else c`
  ExprPtr expression(bool with_condition = true) {
    ExprPtr e = or_expr();
    while (with_condition && at_name("if")) {
      ++k_;
      auto c = make(Expr::Kind::condition, line());
      c->items.push_back(std::move(e));
      c->items.push_back(or_expr());
      c->items.push_back(accept_name("else") ? expression() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  // a, b, c as one list (for `set a, b = ...` right-hand sides and `for ... in a, b`)
  ExprPtr tuple_or_expression() {
    ExprPtr first = expression();
    if (!at_op(",")) return first;
    auto list = make(Expr::Kind::list, line());
    list->name = "tuple";
    list->items.push_back(std::move(first));
    while (accept_op(",") && !done()) list->items.push_back(expression());
    return list;
  }

 private:
  ExprPtr binary(const char* op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::binary, a->line);
    e->name = op;
    e->items.push_back(std::move(a));
    e->items.push_back(std::move(b));
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) e = binary("or", std::move(e), and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) e = binary("and", std::move(e), not_expr());
    return e;
  }
  ExprPtr not_expr() {
    if (at_name("not") && !at_name("in", 1)) {
      ++k_;
      auto e = make(Expr::Kind::unary, line());
      e->name = "not";
      e->items.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr first = math1();
    ExprPtr chain;
    while (true) {
      std::string op;
      const Token* t = peek();
      if (t != nullptr && t->kind == Token::Kind::op &&
          (t->text == "==" || t->text == "!=" || t->text == "<" || t->text == "<=" || t->text == ">" ||
           t->text == ">=")) {
        op = t->text;
        ++k_;
      } else if (accept_name("in")) {
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        k_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!chain) {
        chain = make(Expr::Kind::compare, first->line);
        chain->items.push_back(std::move(first));
      }
      chain->ops.push_back(op);
      chain->items.push_back(math1());
    }
    return chain ? std::move(chain) : std::move(first);
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (at_op("+") || at_op("-")) {
      const char* op = at_op("+") ? "+" : "-";
      ++k_;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (accept_op("~")) e = binary("~", std::move(e), math2());
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      static const char* ops[] = {"*", "/", "//", "%"};
      const char* op = nullptr;
      for (const char* o : ops)
        if (at_op(o)) op = o;
      ++k_;
      e = binary(op, std::move(e), power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (accept_op("**")) e = binary("**", std::move(e), unary());
    return e;
  }
  ExprPtr unary(bool with_filter = true) {
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const std::string op = peek()->text;
      ++k_;
      e = make(Expr::Kind::unary, line());
      e->name = op;
      e->items.push_back(unary(false));
    } else {
      e = postfix(primary());
    }
    return with_filter ? filters(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token* t = peek();
    if (t == nullptr) fail("expected an expression, got the end of the tag");
    const int ln = t->line;
    switch (t->kind) {
      case Token::Kind::string: {
        std::string s;
        while (peek() != nullptr && peek()->kind == Token::Kind::string) s += t_[k_++].text;
        auto e = make(Expr::Kind::literal, ln);
        e->value = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::integer:
      case Token::Kind::floating: {
        ++k_;
        auto e = make(Expr::Kind::literal, ln);
        e->value = t->kind == Token::Kind::integer ? Value::integer(t->i) : Value::floating(t->f);
        return e;
      }
      case Token::Kind::name: {
        ++k_;
        auto e = make(Expr::Kind::literal, ln);
        if (t->text == "true" || t->text == "True") {
          e->value = Value::boolean(true);
        } else if (t->text == "false" || t->text == "False") {
          e->value = Value::boolean(false);
        } else if (t->text == "none" || t->text == "None") {
          e->value = Value::none();
        } else {
          if (is_keyword(t->text)) fail("unexpected '" + t->text + "'");
          e->kind = Expr::Kind::name;
          e->name = t->text;
        }
        return e;
      }
      case Token::Kind::op: break;
    }
    if (accept_op("(")) {
      auto list = make(Expr::Kind::list, ln);
      list->name = "tuple";
      if (accept_op(")")) return list;  // ()
      ExprPtr first = expression();
      if (accept_op(")")) return first;
      list->items.push_back(std::move(first));
      while (accept_op(",") && !at_op(")")) list->items.push_back(expression());
      expect_op(")");
      return list;
    }
    if (accept_op("[")) {
      auto list = make(Expr::Kind::list, ln);
      while (!at_op("]")) {
        list->items.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return list;
    }
    if (accept_op("{")) {
      auto dict = make(Expr::Kind::dict, ln);
      while (!at_op("}")) {
        dict->items.push_back(expression());
        expect_op(":");
        dict->items.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return dict;
    }
    fail("unexpected '" + t->text + "'");
  }

  void call_args(Expr& e) {
    while (!at_op(")")) {
      if (peek() != nullptr && peek()->kind == Token::Kind::name && at_op("=", 1)) {
        std::string name = t_[k_].text;
        k_ += 2;
        e.kwargs.emplace_back(std::move(name), expression());
      } else {
        if (!e.kwargs.empty()) fail("a positional argument follows a keyword argument");
        e.items.push_back(expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        auto a = make(Expr::Kind::attr, line());
        const Token* t = peek();
        if (t == nullptr || (t->kind != Token::Kind::name && t->kind != Token::Kind::integer))
          fail("expected an attribute name after '.'");
        a->name = t->text;
        ++k_;
        a->items.push_back(std::move(e));
        e = std::move(a);
      } else if (accept_op("[")) {
        e = subscript(std::move(e));
      } else if (accept_op("(")) {
        auto c = make(Expr::Kind::call, line());
        c->items.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj) {
    const int ln = line();
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (!at_op(":") && !at_op("]")) parts[n] = expression();
      if (accept_op(":")) {
        is_slice = true;
        if (++n > 2) fail("a slice has at most three parts");
        continue;
      }
      break;
    }
    expect_op("]");
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript");
      auto e = make(Expr::Kind::index, ln);
      e->items.push_back(std::move(obj));
      e->items.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(Expr::Kind::slice, ln);
    e->items.push_back(std::move(obj));
    for (auto& p : parts) e->items.push_back(std::move(p));
    return e;
  }

  // value | f(args) | g ... and value is [not] test args
  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        auto f = make(Expr::Kind::filter, line());
        f->name = expect_name("a filter name after '|'");
        f->filter = find_filter(f->name);
        if (f->filter == nullptr) fail("no filter named '" + f->name + "'");
        f->items.push_back(std::move(e));
        if (accept_op("(")) call_args(*f);
        e = std::move(f);
      } else if (accept_name("is")) {
        auto t = make(Expr::Kind::test, line());
        t->negated = accept_name("not");
        t->name = expect_name("a test name after 'is'");
        t->test = find_test(t->name);
        if (t->test == nullptr) fail("no test named '" + t->name + "'");
        t->items.push_back(std::move(e));
        if (accept_op("(")) {
          call_args(*t);
        } else if (const Token* a = peek(); a != nullptr && a->kind != Token::Kind::op &&
                                            !(a->kind == Token::Kind::name && is_keyword(a->text))) {
          t->items.push_back(postfix(primary()));  // x is divisibleby 3
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t k_ = 0;
  int line_;
};

class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  Body parse() {
    std::string end;
    Body body = body_until({}, end);
    return body;
  }

 private:
  [[noreturn]] static void fail(const std::string& what, int line) { throw TemplateError(what, line); }

  // Statements until a block tag named in `ends` (returned in `which`, its parser positioned
  // after the keyword in `tail_`); the end of the template when `ends` is empty.
  Body body_until(std::initializer_list<std::string_view> ends, std::string& which) {
    Body body;
    while (at_ < segs_.size()) {
      Segment& seg = segs_[at_++];
      if (seg.kind == Segment::Kind::text) {
        auto s = stmt(Stmt::Kind::text, seg.line);
        s->text = std::move(seg.text);
        body.push_back(std::move(s));
        continue;
      }
      ExprParser p(seg.tokens, seg.line);
      if (seg.kind == Segment::Kind::output) {
        if (p.done()) fail("empty {{ }}", seg.line);
        auto s = stmt(Stmt::Kind::output, seg.line);
        s->expr = p.expression();
        p.expect_end();
        body.push_back(std::move(s));
        continue;
      }
      const std::string kw = p.expect_name("a statement name after {%");
      for (std::string_view e : ends)
        if (kw == e) {
          which = kw;
          tail_tokens_ = &seg.tokens;
          tail_line_ = seg.line;
          return body;
        }
      body.push_back(statement(kw, p, seg.line));
    }
    if (ends.size() > 0) {
      std::string names;
      for (std::string_view e : ends) names += (names.empty() ? "" : " or ") + std::string(e);
      fail("unexpected end of template: expected {% " + names + " %}", open_line_);
    }
    return body;
  }

  // The tag that ended a body, from after its keyword.
  ExprParser tail() {
    ExprParser p(*tail_tokens_, tail_line_);
    p.expect_name("a keyword");
    return p;
  }

  static std::unique_ptr<Stmt> stmt(Stmt::Kind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  // The statement `kw` opened on `line`; an unclosed one is reported at its opening line.
  std::unique_ptr<Stmt> statement(const std::string& kw, ExprParser& p, int line) {
    const int outer = open_line_;
    open_line_ = line;
    auto s = dispatch(kw, p, line);
    open_line_ = outer;
    return s;
  }

  std::unique_ptr<Stmt> dispatch(const std::string& kw, ExprParser& p, int line) {
    if (kw == "if") return if_stmt(p, line);
    if (kw == "for") return for_stmt(p, line);
    if (kw == "set") return set_stmt(p, line);
    if (kw == "macro") return macro_stmt(p, line);
    if (kw == "filter") return filter_stmt(p, line);
    if (kw == "break" || kw == "continue") {
      p.expect_end();
      if (loop_depth_ == 0) fail("'" + kw + "' outside a for loop", line);
      return stmt(kw == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_, line);
    }
    if (kw == "generation") {  // transformers' marker for assistant masks: renders its body
      p.expect_end();
      std::string which;
      auto s = stmt(Stmt::Kind::if_, line);
      auto yes = make(Expr::Kind::literal, line);
      yes->value = Value::boolean(true);
      s->conditions.push_back(std::move(yes));
      s->bodies.push_back(body_until({"endgeneration"}, which));
      tail().expect_end();
      return s;
    }
    static constexpr std::string_view refused[] = {"include", "import", "from", "extends", "block", "call"};
    for (std::string_view r : refused)
      if (kw == r) fail("{% " + kw + " %} is not supported: a chat template must be self-contained", line);
    fail("unknown statement '" + kw + "'", line);
  }

  std::unique_ptr<Stmt> if_stmt(ExprParser& p, int line) {
    auto s = stmt(Stmt::Kind::if_, line);
    s->conditions.push_back(p.expression());
    p.expect_end();
    while (true) {
      std::string which;
      Body body = body_until({"elif", "else", "endif"}, which);
      s->bodies.push_back(std::move(body));
      ExprParser t = tail();
      if (which == "elif") {
        s->conditions.push_back(t.expression());
        t.expect_end();
        continue;
      }
      t.expect_end();
      if (which == "else") {
        s->else_body = body_until({"endif"}, which);
        tail().expect_end();
      }
      return s;
    }
  }

  std::unique_ptr<Stmt> for_stmt(ExprParser& p, int line) {
    auto s = stmt(Stmt::Kind::for_, line);
    do {
      s->targets.push_back(p.expect_name("a loop variable"));
    } while (p.accept_op(","));
    if (!p.accept_name("in")) p.fail("expected 'in' in a for loop");
    s->expr = p.expression(false);
    if (p.at_op(",")) p.fail("iterate over a list: write [a, b], not a, b");
    if (p.accept_name("if")) s->loop_filter = p.expression(false);
    if (p.accept_name("recursive")) p.fail("recursive for loops are not supported");
    p.expect_end();
    ++loop_depth_;
    std::string which;
    s->body = body_until({"else", "endfor"}, which);
    --loop_depth_;
    tail().expect_end();
    if (which == "else") {
      s->else_body = body_until({"endfor"}, which);
      tail().expect_end();
    }
    return s;
  }

  std::unique_ptr<Stmt> set_stmt(ExprParser& p, int line) {
    auto s = stmt(Stmt::Kind::set, line);
    s->targets.push_back(p.expect_name("a variable name after set"));
    if (p.accept_op(".")) {
      s->attr = p.expect_name("an attribute name");
    } else {
      while (p.accept_op(",")) s->targets.push_back(p.expect_name("a variable name"));
    }
    if (p.done() && s->attr.empty() && s->targets.size() == 1) {
      s->kind = Stmt::Kind::set_block;
      std::string which;
      s->body = body_until({"endset"}, which);
      tail().expect_end();
      return s;
    }
    p.expect_op("=");
    s->expr = p.tuple_or_expression();
    p.expect_end();
    return s;
  }

  std::unique_ptr<Stmt> macro_stmt(ExprParser& p, int line) {
    auto s = stmt(Stmt::Kind::macro, line);
    s->name = p.expect_name("a macro name");
    p.expect_op("(");
    while (!p.at_op(")")) {
      s->params.push_back(p.expect_name("a parameter name"));
      s->defaults.push_back(p.accept_op("=") ? p.expression() : nullptr);
      if (!p.accept_op(",")) break;
    }
    p.expect_op(")");
    p.expect_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string which;
    s->body = body_until({"endmacro"}, which);
    loop_depth_ = saved;
    tail().expect_end();
    return s;
  }

  std::unique_ptr<Stmt> filter_stmt(ExprParser& p, int line) {
    auto s = stmt(Stmt::Kind::filter, line);
    // `{% filter upper %}` is parsed as the filter expression `__body__ | upper`.
    std::vector<Token> tokens = {Token{Token::Kind::name, "__body__", 0, 0, line},
                                 Token{Token::Kind::op, "|", 0, 0, line}};
    for (Token& t : p.rest()) tokens.push_back(std::move(t));
    ExprParser f(tokens, line);
    s->expr = f.expression();
    f.expect_end();
    std::string which;
    s->body = body_until({"endfilter"}, which);
    tail().expect_end();
    return s;
  }

  std::vector<Segment> segs_;
  size_t at_ = 0;
  const std::vector<Token>* tail_tokens_ = nullptr;
  int tail_line_ = 0;
  int open_line_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_program(std::string_view source) {
  auto program = std::make_shared<Program>();
  program->body = Parser(lex(source)).parse();
  return program;
}

}  // namespace chorus::jinja
