// The Jinja interpreter's errors and limits. What it renders is held against Python's jinja2 in
// tests/python/test_chat_templates.py; here, what a template or its input does wrong.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "engine/template/jinja.h"

namespace chorus {
namespace {

using ojson = nlohmann::ordered_json;

Error parse_error(std::string_view src) {
  auto t = JinjaTemplate::parse(src);
  EXPECT_FALSE(t.ok()) << src;
  return t.ok() ? Error{} : t.error();
}

Result<std::string> render(std::string_view src, const ojson& vars = ojson::object(),
                           RenderLimits limits = {}) {
  auto t = JinjaTemplate::parse(src);
  if (!t) return t.error();
  return t->render(vars, limits);
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  struct Case {
    const char* src;
    const char* message;
  } cases[] = {
      {"a\nb {{ x ", "line 2: unclosed {{: no }}"},
      {"{% if x %}\nyes\n", "line 1: unexpected end of template: expected {% elif or else or endif %}"},
      {"{% for x in y %}{% endif %}", "line 1: unknown statement 'endif'"},
      {"\n\n{{ x | nosuch }}", "line 3: no filter named 'nosuch'"},
      {"{{ x is nosuch }}", "line 1: no test named 'nosuch'"},
      {"{% include 'other.jinja' %}",
       "line 1: {% include %} is not supported: a chat template must be self-contained"},
      {"{{ 'open }}", "line 1: unclosed string literal"},
      {"{# never closed", "line 1: unclosed comment: {# without #}"},
      {"{% break %}", "line 1: 'break' outside a for loop"},
      {"{{ f(a=1, 2) }}", "line 1: a positional argument follows a keyword argument"},
      {"{{ x y }}", "line 1: unexpected 'y' in a tag"},
      {"{% set %}", "line 1: expected a variable name after set"},
  };
  for (const Case& c : cases) {
    const Error e = parse_error(c.src);
    EXPECT_EQ(e.code, Errc::bad_format) << c.src;
    EXPECT_EQ(e.message, c.message) << c.src;
  }
}

TEST(Jinja, RenderErrorsNameTheLineAndTheRefusalIsTheTemplatesOwn) {
  auto r =
      render("ok\n{{ messages[0].content.strip() }}", {{"messages", ojson::array({{{"role", "user"}}})}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::bad_format);
  EXPECT_EQ(r.error().message, "line 2: 'dict object' has no attribute 'content'");

  r = render("{% if x %}\n{{ raise_exception('Conversation roles must alternate') }}{% endif %}",
             {{"x", true}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_EQ(r.error().message, "Conversation roles must alternate");

  r = render("{{ l.append(1) }}", {{"l", ojson::array()}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("list.append is refused"), std::string::npos) << r.error().message;

  EXPECT_FALSE(render("{{ vars }}", ojson::array()).ok());  // the variables must be an object
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  RenderLimits small;
  small.max_steps = 1000;
  auto r = render("{% for i in range(100) %}{% for j in range(100) %}x{% endfor %}{% endfor %}",
                  ojson::object(), small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);
  EXPECT_NE(r.error().message.find("more than 1000 steps"), std::string::npos) << r.error().message;

  small = {};
  small.max_output_bytes = 100;
  r = render("{% for i in range(50) %}abc{% endfor %}", ojson::object(), small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);

  r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);
  EXPECT_NE(r.error().message.find("nested more than 64 deep"), std::string::npos) << r.error().message;

  r = render("{{ range(1000000) | length }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);
}

// A parsed template is immutable: renderings on many threads at once do not interfere.
TEST(Jinja, RendersConcurrently) {
  auto t = JinjaTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 1; k <= 8; ++k)
    threads.emplace_back([&, k] {
      ojson msgs = ojson::array();
      for (int i = 0; i < k; ++i) msgs.push_back({{"role", "user"}});
      for (int rep = 0; rep < 200; ++rep)
        if (*t->render({{"messages", msgs}}) != std::to_string(k)) ++wrong;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace chorus
