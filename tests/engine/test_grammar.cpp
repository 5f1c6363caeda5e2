// Constrained decoding: grammars over bytes, JSON Schema -> grammar, token masks, and generations
// on the default model that can only write what the schema accepts. The Python oracle
// (`jsonschema`, tests/python/test_structured_output.py) validates served outputs; here the
// grammar's own acceptance is checked against hand-written valid and invalid texts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "base/utf8.h"
#include "device/cpu_device.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/model/model.h"
#include "engine/step/generator.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

using B = GrammarBuilder;
using nlohmann::json;

const Tokenizer& default_tokenizer() {
  static std::optional<Result<Tokenizer>> tok;
  if (!tok) tok.emplace(Tokenizer::from_gguf(*test::default_model()));
  return tok->value();
}

// Whether `text` is a whole sentence of the grammar.
bool accepts(const std::shared_ptr<const TokenGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.whole();
}

std::shared_ptr<const TokenGrammar> schema(const json& s) {
  auto g = json_schema_grammar(s);
  EXPECT_TRUE(g.ok()) << g.error().message;
  if (!g) return nullptr;
  return TokenGrammar::create(std::move(*g), default_tokenizer());
}

std::string schema_error(const json& s) {
  auto g = json_schema_grammar(s);
  return g ? "" : g.error().message;
}

TEST(GrammarBuild, RefusesUndefinedEndlessAndLeftRecursiveRules) {
  {
    B b;
    const int32_t x = b.declare("x");
    auto g = b.build(b.add("root", {{B::ref(x)}}));
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.error().message.find("'x' is used but never defined"), std::string::npos)
        << g.error().message;
  }
  {
    B b;  // loop ::= "a" loop: every alternative recurses
    const int32_t loop = b.declare("loop");
    b.define(loop, {{B::byte('a'), B::ref(loop)}});
    auto g = b.build(loop);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.error().message.find("'loop' derives no finite text"), std::string::npos)
        << g.error().message;
  }
  {
    B b;  // list ::= list "," "a" | "a"
    const int32_t list = b.declare("list");
    b.define(list, {{B::ref(list), B::byte(','), B::byte('a')}, {B::byte('a')}});
    auto g = b.build(list);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.error().message.find("'list' can reach itself without consuming text"), std::string::npos)
        << g.error().message;
  }
}

TEST(GrammarMatcher, FollowsBytesAndKnowsWhenTheTextIsWhole) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  B b;  // root ::= "a" "b"{0,2} "c"?
  const int32_t bs = b.repeat("bs", {B::byte('b')}, 0, 2);
  const int32_t c = b.add("c", {{B::byte('c')}, {}});
  auto g = b.build(b.add("root", {{B::byte('a'), B::ref(bs), B::ref(c)}}));
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto tg = TokenGrammar::create(std::move(*g), default_tokenizer());
  for (const char* ok : {"a", "ab", "abb", "ac", "abc", "abbc"}) EXPECT_TRUE(accepts(tg, ok)) << ok;
  for (const char* no : {"", "b", "abbb", "acc", "aa", "abcb"}) EXPECT_FALSE(accepts(tg, no)) << no;
  GrammarMatcher m(tg);
  EXPECT_FALSE(m.whole());
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.whole());
  EXPECT_FALSE(m.accept_bytes("x"));  // refused, nothing changes
  EXPECT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.whole());
  EXPECT_FALSE(m.accept_bytes("c"));
}

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3, null]}, "minItems": 1, "maxItems": 2},
    "nick": {"type": ["string", "null"]},
    "ok": {"const": true}
  },
  "required": ["name", "age", "tags", "ok"],
  "additionalProperties": false
})");

TEST(JsonSchemaGrammar, AcceptsInstancesAndRejectsTheRest) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  auto g = schema(kPerson);
  ASSERT_TRUE(g);
  // kPerson is read into a nlohmann::json, which sorts keys: its properties' order is age, name,
  // nick, ok, score, tags (a schema's own order is kept by ordered_json: PropertiesInTheSchemasOrder).
  for (
      const char* ok : {
          R"({"age":3,"name":"x","ok":true,"tags":["a"]})",
          R"({ "age" : -12, "name": "h\u00e9 \"q\"", "nick": null, "ok":true, "score": 1.5e-3, "tags": [3, null] })",
          "{\n  \"age\": 0,\n  \"name\": \"\xc3\xa9t\xc3\xa9\",\n  \"nick\": \"n\",\n  \"ok\": true,\n  "
          "\"tags\": [\"b\"]\n}",
          R"({"age":1,"name":"12345678","ok":true,"score":-0,"tags":["a","b"]})",
      })
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* no : {
           R"({"age":3,"name":"","ok":true,"tags":["a"]})",               // minLength 1
           R"({"age":3,"name":"123456789","ok":true,"tags":["a"]})",      // maxLength 8
           R"({"age":3.5,"name":"x","ok":true,"tags":["a"]})",            // not an integer
           R"({"age":03,"name":"x","ok":true,"tags":["a"]})",             // leading zero
           R"({"age":3,"name":"x","ok":true,"tags":[]})",                 // minItems 1
           R"({"age":3,"name":"x","ok":true,"tags":["a","b","a"]})",      // maxItems 2
           R"({"age":3,"name":"x","ok":true,"tags":["c"]})",              // not in the enum
           R"({"age":3,"name":"x","ok":false,"tags":["a"]})",             // const
           R"({"age":3,"name":"x","tags":["a"]})",                        // "ok" is required
           R"({"age":3,"name":"x","ok":true,"tags":["a"],"extra":1})",    // additionalProperties false
           R"({"age":3,"name":"x","ok":true,"tags":["a"],})",             // trailing comma
           R"({"age":3,"name":"\ud800","ok":true,"tags":["a"]})",         // a lone surrogate
           "{\"age\":3,\"name\":\"\xc3\",\"ok\":true,\"tags\":[\"a\"]}",  // broken UTF-8
           "{\"age\":3,\"name\":\"a\tb\",\"ok\":true,\"tags\":[\"a\"]}",  // raw control character
       })
    EXPECT_FALSE(accepts(g, no)) << no;
}

// A reply's keys come in the order the schema writes its properties (a schema that puts its
// reasoning before its answer gets the reasoning first), not sorted.
TEST(JsonSchemaGrammar, PropertiesInTheSchemasOrder) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  auto g = json_schema_grammar(nlohmann::ordered_json::parse(R"({"type": "object",
    "properties": {"reasoning": {"type": "string"}, "answer": {"type": "integer"}, "confidence": {"type": "number"}},
    "required": ["reasoning", "answer"], "additionalProperties": false})"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto tg = TokenGrammar::create(std::move(*g), default_tokenizer());
  EXPECT_TRUE(accepts(tg, R"({"reasoning": "2+2", "answer": 4})"));
  EXPECT_TRUE(accepts(tg, R"({"reasoning": "2+2", "answer": 4, "confidence": 0.9})"));
  EXPECT_FALSE(accepts(tg, R"({"answer": 4, "reasoning": "2+2"})"));
  EXPECT_FALSE(accepts(tg, R"({"reasoning": "2+2", "confidence": 0.9, "answer": 4})"));
  // Through an output constraint (what a request carries): its text keeps the order too.
  auto c = grammar_of(OutputConstraint::json_schema_of(
      R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"integer"}},"required":["z","a"]})"));
  ASSERT_TRUE(c.ok());
  auto tc = TokenGrammar::create(std::move(*c), default_tokenizer());
  EXPECT_TRUE(accepts(tc, R"({"z":1,"a":2})"));
  EXPECT_FALSE(accepts(tc, R"({"a":2,"z":1})"));
}

// minimum / maximum / exclusive bounds, exact on integers (every integer from -30 to 300 checked
// against the bounds in arithmetic), and on numbers with whole bounds; and the formats chorus writes.
TEST(JsonSchemaGrammar, BoundsAndFormats) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  struct Case {
    const char* schema;
    double lo, hi;
    bool lo_open, hi_open;
  };
  for (const Case& c :
       {Case{R"({"type":"integer","minimum":-5,"maximum":120})", -5, 120, false, false},
        Case{R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})", 0, 10, true, true},
        Case{R"({"type":"integer","minimum":7})", 7, 1e300, false, false},
        Case{R"({"type":"integer","maximum":-3})", -1e300, -3, false, false},
        Case{R"({"type":"integer","minimum":0.5,"maximum":99.5})", 0.5, 99.5, false, false}}) {
    auto g = schema(json::parse(c.schema));
    ASSERT_TRUE(g) << c.schema;
    for (int v = -30; v <= 300; ++v) {
      const bool in = (c.lo_open ? v > c.lo : v >= c.lo) && (c.hi_open ? v < c.hi : v <= c.hi);
      EXPECT_EQ(accepts(g, std::to_string(v)), in) << c.schema << " " << v;
    }
    EXPECT_FALSE(accepts(g, "05")) << c.schema;
  }
  auto unit = schema(json::parse(R"({"type":"number","minimum":0,"maximum":1})"));
  for (const char* ok : {"0", "0.5", "0.000", "1", "1.0", "1.000", "0.999"})
    EXPECT_TRUE(accepts(unit, ok)) << ok;
  for (const char* no : {"1.5", "1.01", "-0.1", "2", "01", "1e0"}) EXPECT_FALSE(accepts(unit, no)) << no;
  auto open = schema(json::parse(R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":2})"));
  for (const char* ok : {"0.1", "1", "1.9", "0.001"}) EXPECT_TRUE(accepts(open, ok)) << ok;
  for (const char* no : {"0", "0.0", "2", "2.0", "2.5"}) EXPECT_FALSE(accepts(open, no)) << no;
  EXPECT_NE(schema_error(json::parse(R"({"type":"number","minimum":-1.5})")).find("whole numbers"),
            std::string::npos);
  EXPECT_NE(schema_error(json::parse(R"({"type":"integer","minimum":3,"maximum":2})")).find("no integer"),
            std::string::npos);

  const std::vector<std::tuple<const char*, std::vector<const char*>, std::vector<const char*>>> formats = {
      {"date",
       {"2026-12-07", "1999-02-28", "2030-04-30"},
       {"2026-13-01", "2026-02-30", "2026-04-31", "26-12-07"}},
      {"time", {"10:00:00Z", "23:59:59.123+02:00", "00:00:00-05:30"}, {"24:00:00Z", "10:60:00Z", "10:00:00"}},
      {"date-time",
       {"2026-12-07T10:00:00Z", "2026-01-31T23:59:59.5+01:00"},
       {"2026-12-07 10:00:00Z", "2026-12-07T10:00Z"}},
      {"uuid",
       {"123e4567-e89b-12d3-a456-426614174000"},
       {"123e4567e89b12d3a456426614174000", "123E4567-e89b-12d3-a456-42661417400"}},
      {"email", {"ann@example.org", "a.b+c@mail.co.uk"}, {"ann", "@example.org", "ann@example"}},
      {"ipv4", {"0.0.0.0", "192.168.1.255", "255.255.255.255"}, {"256.1.1.1", "1.2.3", "01.2.3.4"}}};
  for (const auto& [f, ok, no] : formats) {
    auto g = schema(json{{"type", "string"}, {"format", f}});
    ASSERT_TRUE(g) << f;
    for (const char* v : ok) EXPECT_TRUE(accepts(g, json(v).dump())) << f << " " << v;
    for (const char* v : no) EXPECT_FALSE(accepts(g, json(v).dump())) << f << " " << v;
  }
  EXPECT_NE(schema_error(json::parse(R"({"type":"string","format":"hostname"})")).find("format 'hostname'"),
            std::string::npos);
}

// `pattern`: what the grammar writes matches the pattern (std::regex, ECMAScript, as the oracle:
// every string of up to 4 characters over a small alphabet that the grammar accepts is a match),
// the examples are written, and what the subset does not hold is refused by name.
TEST(JsonSchemaGrammar, PatternsWriteMatches) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  struct Case {
    const char* re;
    std::vector<const char*> ok, no;
  };
  const std::vector<Case> cases = {
      {"^[A-Z]{3}-\\d{4}$", {"ABC-1234", "ZZZ-0000"}, {"AB-1234", "abc-1234", "ABC-12345", "ABC1234"}},
      {"^(red|green|blue)$", {"red", "blue"}, {"redd", "", "Red"}},
      {"^\\w+@\\w+\\.com$", {"ann@mail.com", "a_1@b.com"}, {"ann@mail.org", "@mail.com"}},
      {"ab+c", {"xxabbbcyy", "abc"}, {"ac", "abd"}},
      {"^[^0-9]*$", {"abc def", ""}, {"a1"}},
      {"^a{2,3}(?:-b)?$", {"aa", "aaa", "aa-b"}, {"a", "aaaa", "aa-"}},
      {"^[a-c.@-]+$", {"a.b-c@", "cab"}, {"d", "a b"}},
  };
  const std::string alphabet = "aAb1-@.c ";
  int written = 0;
  for (const Case& c : cases) {
    auto g = schema(json{{"type", "string"}, {"pattern", c.re}});
    ASSERT_TRUE(g) << c.re;
    const std::regex re(c.re, std::regex::ECMAScript);
    for (const char* v : c.ok) EXPECT_TRUE(accepts(g, json(v).dump())) << c.re << " " << v;
    for (const char* v : c.no) EXPECT_FALSE(accepts(g, json(v).dump())) << c.re << " " << v;
    std::vector<std::string> all = {""};
    for (size_t len = 1, from = 0; len <= 4; ++len) {
      const size_t to = all.size();
      for (size_t i = from; i < to; ++i)
        for (char ch : alphabet) all.push_back(all[i] + ch);
      from = to;
    }
    for (const std::string& v : all)
      if (accepts(g, json(v).dump())) {
        ++written;
        EXPECT_TRUE(std::regex_search(v, re)) << c.re << " wrote " << v;
      }
  }
  EXPECT_GT(written, 1000) << "the short strings checked include many the grammar writes";
  for (const auto& [re, what] : std::vector<std::pair<const char*, const char*>>{{"(?=a)b", "'(?'"},
                                                                                 {"a*?", "lazy"},
                                                                                 {"\\bword", "escape '\\b'"},
                                                                                 {"a^b", "'^'"},
                                                                                 {"[é]", "printable ASCII"},
                                                                                 {"(ab", "unclosed '('"},
                                                                                 {"a{3,1}", "'{3,1}'"}})
    EXPECT_NE(schema_error(json{{"type", "string"}, {"pattern", re}}).find(what), std::string::npos) << re;
}

TEST(JsonSchemaGrammar, RecursiveReferencesThatEnd) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  auto g = schema(json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
              "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "$ref": "#/$defs/node"})"));
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(g, R"({"kids":[{"v":2},{"kids":[],"v":3}],"v":1})"));
  EXPECT_FALSE(accepts(g, R"({"kids":[{"w":2}],"v":1})"));
  // json_object: any object, never a bare value.
  auto any = TokenGrammar::create(json_object_grammar(), default_tokenizer());
  EXPECT_TRUE(accepts(any, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(accepts(any, R"([1])"));
  EXPECT_FALSE(accepts(any, R"("s")"));
}

// Free text without '<', then at most one call of a known tool with valid arguments.
TEST(ToolCallGrammar, OnlyValidCallsOfKnownTools) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  auto g = tool_call_grammar(json::parse(R"([
    {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                   "required": ["a", "b"], "additionalProperties": false}},
    {"name": "clock", "parameters": null}])"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto tg = TokenGrammar::create(std::move(*g), default_tokenizer());
  for (const char* ok :
       {"", "I will add them.",
        "Sum: <tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"clock\", \"arguments\": {\"tz\":\"UTC\"}}\n</tool_call>"})
    EXPECT_TRUE(accepts(tg, ok)) << ok;
  // One spelling of the wrapper (the one templates write back): no other spacing around it.
  for (const char* no :
       {"a < b", "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}</tool_call>",
        "<tool_call>\n{\"name\":\"clock\",\"arguments\":{}}\n</tool_call>",
        "<tool_call>{\"name\": \"sub\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2}}</tool_call>",
        "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": \"3\"}}</tool_call>",
        "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}</tool_call> more"})
    EXPECT_FALSE(accepts(tg, no)) << no;
  GrammarMatcher m(tg);
  ASSERT_TRUE(m.accept_bytes("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1"));
  EXPECT_FALSE(m.whole());  // inside a call the text is not whole: the end token is not allowed
  EXPECT_NE(tool_call_grammar(json::parse(R"([{"name": "a"}, {"name": "a"}])"))
                .error()
                .message.find("two tools are named 'a'"),
            std::string::npos);
  EXPECT_NE(
      tool_call_grammar(json::parse(R"([{"name": "a", "parameters": {"type": "string", "format": "x"}}])"))
          .error()
          .message.find("tool 'a': JSON schema at '#/format': format 'x' is not supported"),
      std::string::npos);
}

TEST(JsonSchemaGrammar, RefusesWhatItDoesNotSupportByName) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::parse(R"j({"type":"string","pattern":"(?<n>a)"})j"),
       "'(?' (lookaround or a named group) is not supported"},
      {json::parse(R"({"type":"string","format":"hostname"})"), "format 'hostname' is not supported"},
      {json::parse(R"({"type":"integer","multipleOf":3})"), "keyword 'multipleOf' is not supported"},
      {json::parse(R"({"oneOf":[{"type":"string"}]})"), "keyword 'oneOf' is not supported"},
      {json::parse(R"({"type":"array","uniqueItems":true})"), "keyword 'uniqueItems' is not supported"},
      {json::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})"),
       "a schema here is not supported"},
      {json::parse(R"({"properties":{"a":{"type":"strin"}}})"), "unknown type 'strin'"},
      {json::parse(R"({"$ref":"https://example.com/s.json"})"), "only references into the same document"},
  };
  for (const auto& [s, want] : cases) {
    const std::string e = schema_error(s);
    EXPECT_NE(e.find(want), std::string::npos) << s.dump() << " -> " << e;
  }
  EXPECT_NE(schema_error(json::parse(R"({"properties":{"a":{"type":"integer","multipleOf":1}}})"))
                .find("'#/properties/a'"),
            std::string::npos)
      << "the error names where the keyword is";
}

TEST(JsonSchemaGrammar, UnsatisfiableSchemasAreErrorsNotHangs) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json(false), "accepts nothing"},
      {json::parse(R"({"enum":[]})"), "no value is allowed"},
      {json::parse(R"({"type":"string","enum":[1,2]})"), "no value is allowed"},
      {json::parse(R"({"type":"object","properties":{},"required":["a"]})"), "'a' is not in 'properties'"},
      {json::parse(R"({"type":"string","minLength":5,"maxLength":2})"), "minLength is more than maxLength"},
      {json::parse(R"({"type":"array","minItems":3,"maxItems":1})"), "minItems is more than maxItems"},
      {json::parse(R"({"$ref":"#"})"), "derives no finite text"},
      {json::parse(R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})"),
       "derives no finite text"},
      {json::parse(R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})"), "without consuming text"},
      {json::parse(R"({"$ref":"#/$defs/missing"})"), "points at nothing"},
      {json::parse(R"({"type":"string","maxLength":100000})"), "never defined"},
  };
  for (const auto& [s, want] : cases) {
    const std::string e = schema_error(s);
    EXPECT_NE(e.find(want), std::string::npos) << s.dump() << " -> " << e;
  }
  json deep = json::object();
  for (int i = 0; i < 100; ++i) deep = json{{"type", "array"}, {"items", deep}};
  EXPECT_NE(schema_error(deep).find("nested more than 64"), std::string::npos);
}

// The mask is exact: every token in it can follow, none outside it can; end-of-generation
// tokens only when the text is whole.
TEST(TokenMask, HoldsExactlyTheTokensThatCanFollow) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  auto g = schema(kPerson);
  ASSERT_TRUE(g);
  const Tokenizer& tok = default_tokenizer();
  const TokenId eos = *tok.find_token("<|im_end|>");
  for (const char* prefix : {"", "{\"age\": 1", "{\"age\":1,\"name\":\"ab",
                             "{\"age\":1,\"name\":\"a\",\"ok\":true,\"tags\":[\"a\"]}"}) {
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    auto mask = m.allowed();
    int64_t n = 0;
    for (size_t t = 0; t < tok.vocab_size(); ++t) {
      const auto id = static_cast<TokenId>(t);
      GrammarMatcher copy = m;
      const bool can = copy.accept(id);
      ASSERT_EQ(mask->test(id), can) << "prefix '" << prefix << "' token " << t << " '" << tok.token_text(id)
                                     << "'";
      n += can ? 1 : 0;
    }
    EXPECT_EQ(mask->count, n);
    EXPECT_EQ(mask->test(eos), m.whole()) << prefix;
    EXPECT_GT(n, 0) << prefix;
  }
  EXPECT_GT(g->n_masks_looked_up(), 0);
}

// Sampling at temperature 1.5 on the default model: every output is whole and parses, with the
// schema's properties, whatever the seed.
TEST(ConstrainedGeneration, HotSamplingStillWritesTheSchema) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  auto model = Model::load(default_model_path());
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  auto device = CpuDevice::create();
  ASSERT_TRUE(device.ok());
  auto g = schema(kPerson);
  ASSERT_TRUE(g);
  GenerateOptions o;
  o.max_new_tokens = 200;
  o.n_ctx = 512;
  o.sampling.temperature = 1.5f;
  o.sampling.top_k = 0;
  o.sampling.top_p = 1.0f;
  o.sampling.min_p = 0.0f;
  o.sampling.seed = 7;
  o.sampling.grammar = g;
  const int kSeqs = 4;
  auto gen = Generator::create(**model, **device, kSeqs, o);
  ASSERT_TRUE(gen.ok()) << gen.error().to_string();
  const auto prompt = (*model)->tokenizer.encode(
      "<|im_start|>user\nDescribe a person as JSON.<|im_end|>\n<|im_start|>assistant\n",
      {.parse_special = true});
  auto st = (*gen)->run(prompt, nullptr);
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  int whole = 0;
  for (const auto& out : (*gen)->outputs()) {
    std::vector<TokenId> body = out;
    const bool ended = !body.empty() && body.back() == *(*model)->tokenizer.find_token("<|im_end|>");
    if (ended) body.pop_back();
    const std::string text = (*model)->tokenizer.decode(body, {.render_special = false});
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_bytes(text)) << text;  // always a prefix of an instance
    if (!ended) continue;                       // cut by max_new_tokens: a documented partial
    ++whole;
    ASSERT_TRUE(m.whole()) << text;
    const json v = json::parse(text);
    for (const char* k : {"name", "age", "tags", "ok"}) EXPECT_TRUE(v.contains(k)) << text;
    EXPECT_TRUE(v["age"].is_number_integer()) << text;
    EXPECT_EQ(v["ok"], true) << text;
  }
  EXPECT_GT(whole, 0) << "no output ended within " << o.max_new_tokens << " tokens";
}

}  // namespace
}  // namespace chorus

namespace chorus {
namespace {

std::shared_ptr<const TokenGrammar> gbnf(std::string_view text) {
  auto g = gbnf_grammar(text);
  EXPECT_TRUE(g.ok()) << g.error().message;
  if (!g) return nullptr;
  return TokenGrammar::create(std::move(*g), default_tokenizer());
}

std::string gbnf_error(std::string_view text) {
  auto g = gbnf_grammar(text);
  return g ? "" : g.error().message;
}

// GBNF as llama.cpp writes it: rules over several lines, comments, literals with escapes,
// classes, groups, repetitions; the sentences it takes and those it does not.
TEST(Gbnf, TheNotationAndItsSentences) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  const auto g = gbnf(R"(# a date, a list or a yes/no
root ::= date | list
       | answer
date ::= [0-9]{4} "-" [0-1] [0-9] "-" [0-3][0-9]
list ::= "[" (item ("," " "? item)*)? "]"
item ::= "\"" [^"\\\n]+ "\""
answer ::= ("yes" | "no") "."?   # done
)");
  for (const char* ok : {"2024-12-31", "[]", "[\"a\", \"b\",\"c\"]", "yes", "no.", "[\"é ü 日本\"]"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* no : {"2024-1-31", "24-12-31", "[\"a\",]", "[\"\"]", "maybe", "yes..", "[\"a\nb\"]", ""})
    EXPECT_FALSE(accepts(g, no)) << no;

  // Escapes, `.`, and classes with non-ASCII ranges (spelled as their UTF-8 bytes).
  const auto u = gbnf(R"(root ::= "\x41\u00e9\t" [α-γ]+ . "\"")");
  EXPECT_TRUE(accepts(u, "Aé\tαβγ!\""));
  EXPECT_TRUE(accepts(u, "Aé\tβ日\""));
  EXPECT_FALSE(accepts(u, "Aé\tδ!\""));
  EXPECT_FALSE(accepts(u, "Aé\tα\""));  // `.` wants a character before the quote
  // Repetition bounds.
  const auto rep = gbnf(R"(root ::= "a"{2,3} "b"{1,} "c"{0,1} "d"{2})");
  EXPECT_TRUE(accepts(rep, "aabdd"));
  EXPECT_TRUE(accepts(rep, "aaabbbcdd"));
  EXPECT_FALSE(accepts(rep, "abdd"));
  EXPECT_FALSE(accepts(rep, "aaaabdd"));
  EXPECT_FALSE(accepts(rep, "aabccdd"));
  // Recursion: balanced brackets.
  const auto rec = gbnf("root ::= pair\npair ::= \"(\" pair* \")\"");
  EXPECT_TRUE(accepts(rec, "(()(()))"));
  EXPECT_FALSE(accepts(rec, "(()"));
  EXPECT_FALSE(accepts(rec, "())"));
}

// A negated class covers every other code point, of every UTF-8 length, and no surrogate; a
// class of one byte stays one byte set.
TEST(Gbnf, ClassesCoverExactlyTheirCodePoints) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  const auto g = gbnf("root ::= [^a-z\\u0400-\\u04FF]");
  for (uint32_t cp : {0x41u, 0x7Fu, 0x80u, 0x3FFu, 0x500u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFFu,
                      0x10000u, 0x10FFFFu}) {
    std::string s;
    append_utf8(s, cp);
    EXPECT_TRUE(accepts(g, s)) << std::hex << cp;
  }
  for (uint32_t cp : {0x61u, 0x7Au, 0x400u, 0x4FFu}) {
    std::string s;
    append_utf8(s, cp);
    EXPECT_FALSE(accepts(g, s)) << std::hex << cp;
  }
  EXPECT_FALSE(accepts(g, "\xED\xA0\x80"));  // a surrogate's bytes are not UTF-8
  EXPECT_FALSE(accepts(g, "\xC0\x80"));      // nor an overlong form
}

TEST(Gbnf, ErrorsNameTheLineOrTheRule) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"rot ::= \"a\"", "there is no `root` rule"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2 column 1: rule `root` is defined twice"},
      {"root ::= item", "rule `item` is used but never defined"},
      {"root ::= \"a", "line 1 column 10: this literal is never closed"},
      {"root ::= [a-", "this class is never closed"},
      {"root ::= [z-a]", "runs backwards"},
      {"root ::= (\"a\"", "this `(` is never closed"},
      {"root ::= \"a\")", "`)` without its `(`"},
      {"root ::= \"a\"{3,2}", "needs m <= n"},
      {"root ::= \"a\"{5000}", "more than 1000 copies"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"\\uD800\"", "names no Unicode character"},
      {"root ::= @", "line 1 column 10: unexpected `@`"},
      {"root = \"a\"", "`::=` is expected"},
      {"root ::= loop\nloop ::= \"a\" loop", "derives no finite text"},
      {"root ::= root \"a\" | \"b\"", "root"},  // left recursion
      {"root ::= [^\\u0000-\\U0010FFFF]", "matches no character"},
  };
  for (const auto& [text, want] : cases) {
    const std::string e = gbnf_error(text);
    EXPECT_NE(e.find(want), std::string::npos) << text << " -> " << e;
  }
  EXPECT_NE(gbnf_error(std::string(kMaxGbnfBytes + 1, ' ')).find("at most"), std::string::npos);
}

}  // namespace
}  // namespace chorus
