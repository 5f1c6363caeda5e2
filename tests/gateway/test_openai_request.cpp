// The request parser of `chorus serve` (gateway/openai_request.h): what it reads, and the errors
// it gives — OpenAI-style JSON naming the field — for bodies that are not what it wants. The
// cases below the first were found by fuzz/chat_request_fuzz.cpp: each used to escape as an
// exception other than HttpError (the gateway answered 500 "internal error").
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "gateway/openai_request.h"

namespace chorus {
namespace {

using json = nlohmann::json;

// The error a body gets: its status, and its parsed JSON error object.
std::pair<int, json> refusal(const std::string& body) {
  try {
    (void)parse_chat_request(body, "m", 256, 4096);
  } catch (const HttpError& e) {
    const json j = json::parse(e.body);  // must be JSON, whatever the body held
    return {e.status, j.at("error")};
  }
  ADD_FAILURE() << "accepted: " << body;
  return {0, json()};
}

TEST(OpenAiRequest, ReadsEveryField) {
  const ChatRequest r = parse_chat_request(
      R"({"model":"default","messages":[{"role":"developer","content":"terse"},)"
      R"({"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":" there"}]},)"
      R"({"role":"assistant","content":null}],"max_completion_tokens":16,"temperature":0.5,"top_p":0.9,"seed":7,)"
      R"("stop":["END"],"stream":true,"stream_options":{"include_usage":true},"extra_body":{"program_id":"a7"}})",
      "m", 256, 4096);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.program_id, "a7");
}

TEST(OpenAiRequest, ClassicRefusalsNameTheField) {
  EXPECT_EQ(refusal(R"({"model":"x","messages":[{"role":"user","content":"a"}]})").first, 404);
  auto [status, e] = refusal(R"({"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":-5})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_EQ(
      refusal(R"({"model":"m","messages":[{"role":"user","content":"a"}],"stop":["a","b","c","d","e"]})")
          .second["param"],
      "stop");
}

// No field is silently ignored: what chorus does not do is a 400 naming it, unless its value
// asks for nothing.
TEST(OpenAiRequest, FieldsItDoesNotHonourAreRefusedByName) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"a"}],)";
  for (const char* f :
       {R"("functions":[{"name":"f"}])", R"("audio":{"voice":"alloy"})", R"("modalities":["audio"])",
        R"("prediction":{"type":"content","content":"x"})", R"("frobnicate":1)"}) {
    auto [status, e] = refusal(head + f + "}");
    EXPECT_EQ(status, 400) << f;
    const std::string name = json::parse(std::string("{") + f + "}").begin().key();
    EXPECT_EQ(e["param"], name) << f;
    EXPECT_NE(e["message"].get<std::string>().find("not supported"), std::string::npos) << f;
  }
  for (const char* f :
       {R"("tools":[])", R"("logprobs":false)", R"("presence_penalty":0)", R"("tool_choice":"none")",
        R"("parallel_tool_calls":true)", R"("user":"u1")", R"("top_logprobs":null)", R"("store":false)"})
    EXPECT_NO_THROW(parse_chat_request(head + f + "}", "m", 256, 4096)) << f;
  // Fields that do not change the reply are accepted when well-formed, refused naming them when not.
  for (const char* f :
       {R"("store":true)", R"("metadata":{"run":"7","user":"ann"})", R"("metadata":{})",
        R"("service_tier":"auto")", R"("service_tier":"priority")", R"("prompt_cache_key":"k-1")",
        R"("safety_identifier":"hash-9")", R"("verbosity":"medium")"})
    EXPECT_NO_THROW(parse_chat_request(head + f + "}", "m", 256, 4096)) << f;
  for (const char* f :
       {R"("store":"yes")", R"("metadata":{"n":1})", R"("metadata":[1])", R"("service_tier":"gold")",
        R"("prompt_cache_key":5)", R"("safety_identifier":{})", R"("verbosity":"low")"}) {
    auto [status, e] = refusal(head + f + "}");
    EXPECT_EQ(status, 400) << f;
    EXPECT_EQ(e["param"], json::parse(std::string("{") + f + "}").begin().key()) << f;
  }
}

// logprobs, n, penalties, logit_bias; and /v1/completions' prompt, echo, suffix, best_of.
TEST(OpenAiRequest, SamplingFieldsAndCompletions) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"a"}],)";
  ChatRequest r =
      parse_chat_request(head + R"("logprobs":true,"top_logprobs":3,"n":4,"presence_penalty":0.5,)"
                                R"("frequency_penalty":-1,"logit_bias":{"5":-100,"7":2.5}})",
                         "m", 256, 4096, 100);
  EXPECT_EQ(r.sampling.logprobs, 3);
  EXPECT_EQ(r.n, 4);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.0f);
  EXPECT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(parse_chat_request(head + R"("logprobs":true})", "m", 256, 4096).sampling.logprobs, 0);
  EXPECT_EQ(parse_chat_request(head + R"("logprobs":false})", "m", 256, 4096).sampling.logprobs, -1);
  for (const auto& [f, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("top_logprobs":2)", "top_logprobs"},
           {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
           {R"("logprobs":1)", "logprobs"},
           {R"("n":0)", "n"},
           {R"("n":17)", "n"},
           {R"("presence_penalty":2.5)", "presence_penalty"},
           {R"("logit_bias":{"100":1})", "logit_bias"},
           {R"("logit_bias":{"-1":1})", "logit_bias"},
           {R"("logit_bias":{"x":1})", "logit_bias"},
           {R"("logit_bias":{"5":-101})", "logit_bias"},
           {R"("logit_bias":[1])", "logit_bias"}}) {
    try {
      (void)parse_chat_request(head + f + "}", "m", 256, 4096, 100);
      ADD_FAILURE() << "accepted " << f;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400) << f;
      EXPECT_EQ(json::parse(e.body)["error"]["param"], param) << f;
    }
  }

  ChatRequest c = parse_completion_request(R"({"model":"m","prompt":"Once","echo":true,"n":2,"best_of":2})",
                                           "m", 4096, 100);
  EXPECT_TRUE(c.completion);
  EXPECT_EQ(c.prompt_text, "Once");
  EXPECT_TRUE(c.echo);
  EXPECT_EQ(c.max_tokens, 16);  // OpenAI's default for completions
  c = parse_completion_request(R"({"model":"m","prompt":[[1,2,3]],"logprobs":2,"suffix":""})", "m", 4096,
                               100);
  EXPECT_EQ(c.prompt_ids, (std::vector<TokenId>{1, 2, 3}));
  EXPECT_EQ(c.sampling.logprobs, 2);
  EXPECT_EQ(parse_completion_request(R"({"model":"m","prompt":["x"]})", "m", 4096).prompt_text, "x");
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model":"m"})", "prompt"},
           {R"({"model":"m","prompt":["a","b"]})", "prompt"},
           {R"({"model":"m","prompt":[1,100]})", "prompt"},
           {R"({"model":"m","prompt":[]})", "prompt"},
           {R"({"model":"m","prompt":{"a":1}})", "prompt"},
           {R"({"model":"m","prompt":"a","suffix":"b"})", "suffix"},
           {R"({"model":"m","prompt":"a","best_of":3})", "best_of"},
           {R"({"model":"m","prompt":"a","echo":true,"logprobs":0})", "echo"},
           {R"({"model":"m","prompt":"a","messages":[]})", "messages"},
           {R"({"model":"m","prompt":"a","tools":[]})", "tools"}}) {
    try {
      (void)parse_completion_request(body, "m", 4096, 100);
      ADD_FAILURE() << "accepted " << body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(json::parse(e.body)["error"]["param"], param) << body;
    }
  }
}

// tools / tool_choice / parallel_tool_calls: required and a named function become a constraint
// of calls only; what cannot be followed is a 400 naming the field.
TEST(OpenAiRequest, ToolsAndToolChoice) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"a"}],"tools":[)"
                           R"({"type":"function","function":{"name":"f","parameters":{"type":"object"}}},)"
                           R"({"type":"function","function":{"name":"g"}}])";
  ChatRequest r = parse_chat_request(head + "}", "m", 256, 4096);
  EXPECT_EQ(r.tools.names, (std::vector<std::string>{"f", "g"}));
  EXPECT_TRUE(r.tools.active());
  EXPECT_FALSE(r.tools.constrained());
  EXPECT_TRUE(r.sampling.constraint.empty());  // auto: not constrained
  r = parse_chat_request(head + R"(,"tool_choice":"required","parallel_tool_calls":false})", "m", 256, 4096);
  EXPECT_EQ(r.sampling.constraint.kind, OutputConstraint::Kind::tool_calls);
  EXPECT_EQ(json::parse(r.sampling.constraint.schema)["parallel"], false);
  EXPECT_EQ(json::parse(r.sampling.constraint.schema)["tools"].size(), 2u);
  r = parse_chat_request(head + R"(,"tool_choice":{"type":"function","function":{"name":"g"}}})", "m", 256,
                         4096);
  EXPECT_EQ(json::parse(r.sampling.constraint.schema)["tools"], json::parse(R"([{"name":"g"}])"));
  r = parse_chat_request(head + R"(,"tool_choice":"none"})", "m", 256, 4096);
  EXPECT_FALSE(r.tools.active());
  EXPECT_TRUE(r.tools.offered());

  const std::string one = R"({"model":"m","messages":[{"role":"user","content":"a"}],)";
  const struct {
    std::string body, param;
  } bad[] = {
      {one +
           R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]})",
       "tools[1].function.name"},
      {one + R"("tools":[{"type":"function","function":{"name":"a b"}}]})", "tools[0].function.name"},
      {one + R"("tools":[{"type":"retrieval"}]})", "tools[0]"},
      {one +
           R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"string","format":"uri"}}}]})",
       "tools[0].function.parameters"},
      {one + R"("tool_choice":"required"})", "tool_choice"},
      {one + R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"})",
       "tool_choice"},
      {one +
           R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"h"}}})",
       "tool_choice"},
      {one +
           R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}})",
       "tool_choice"},
      {R"({"model":"m","messages":[{"role":"tool","content":"x"}]})", "messages[0].tool_call_id"},
      {R"({"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]})",
       "messages[0].tool_calls"},
      {R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
  };
  for (const auto& b : bad) {
    auto [status, e] = refusal(b.body);
    EXPECT_EQ(status, 400) << b.body;
    EXPECT_EQ(e["param"], b.param) << b.body << "\n" << e.dump();
  }
  r = parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"2"}]})",
      "m", 256, 4096);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_TRUE(r.messages[1].null_content);
  EXPECT_EQ(json::parse(r.messages[1].tool_calls)[0]["id"], "c1");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
}

TEST(ToolCalls, ReadBackInEachFormatAndNeverInvented) {
  ChatTools t;
  t.names = {"get_weather", "search"};
  auto calls = read_tool_calls(
      "Let me see.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}</tool_call>",
      t);
  ASSERT_EQ(calls.calls.size(), 2u);
  EXPECT_EQ(calls.content, "Let me see.\n");
  EXPECT_EQ(calls.calls[0].name, "search");
  EXPECT_EQ(calls.calls[0].arguments, R"({"q": "x"})");         // as the model wrote them
  EXPECT_EQ(calls.calls[1].arguments, R"({"city": "Paris"})");  // arguments given as a JSON string
  EXPECT_NE(calls.calls[0].id, calls.calls[1].id);
  EXPECT_EQ(read_tool_calls(R"([TOOL_CALLS][{"name": "search", "arguments": {"q": "y"}}])", t).calls.size(),
            1u);
  EXPECT_EQ(read_tool_calls(R"( {"name": "get_weather", "parameters": {"city": "Oslo"}})", t).calls.size(),
            1u);
  // Not calls: an unknown tool, JSON that does not parse, arguments that are no object, a call left open.
  for (const char* text :
       {R"(<tool_call>{"name": "rm", "arguments": {}}</tool_call>)",
        R"(<tool_call>{"name": "search", "arguments": {"q": </tool_call>)",
        R"(<tool_call>{"name": "search", "arguments": [1]}</tool_call>)",
        R"(<tool_call>{"name": "search", "arguments": {"q": "z"}})", R"({"a": 1})", "plain text"}) {
    const ToolReply r = read_tool_calls(text, t);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
  // Cut by max_tokens: the complete calls are kept when the reply was constrained.
  const std::string cut =
      R"(<tool_call>{"name": "search", "arguments": {"q": "z"}}</tool_call><tool_call>{"na)";
  EXPECT_EQ(read_tool_calls(cut, t, true).calls.size(), 1u);
  EXPECT_EQ(read_tool_calls(cut, t, true).cut, R"(<tool_call>{"na)") << "what was cut is said";
  EXPECT_TRUE(read_tool_calls(cut, t, false).calls.empty());
  EXPECT_TRUE(read_tool_calls(R"(<tool_call>{"na)", t, true).cut.empty())
      << "no complete call: all is content";
  t.parallel = false;
  EXPECT_EQ(read_tool_calls(cut, t, true).calls.size(), 1u);
  EXPECT_TRUE(read_tool_calls(cut, t, true).cut.empty()) << "one call is the whole reply";
}

// A reply's call, sent back in the history, is written as the grammar spells calls (the model's
// arguments text as it came): the reply's text is the next prompt's prefix.
TEST(ToolCalls, CallsInTheHistoryAreWrittenAsTheReplyWasSpelt) {
  ChatTools t;
  t.names = {"get_weather"};
  const std::string reply =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":  \"Paris\", \"n\": "
      "[1,2]}}\n</tool_call>";
  const ToolReply got = read_tool_calls(reply, t);
  ASSERT_EQ(got.calls.size(), 1u);
  ChatMessage m{"assistant", ""};
  m.null_content = true;
  m.tool_calls =
      json::array({{{"id", got.calls[0].id},
                    {"type", "function"},
                    {"function", {{"name", "get_weather"}, {"arguments", got.calls[0].arguments}}}}})
          .dump();
  const auto text = calls_as_text({m});
  ASSERT_EQ(text.size(), 1u);
  EXPECT_EQ(text[0].content, reply);
}

// Streaming holds back exactly what may be a call, and lets everything else through.
TEST(ToolCalls, TheStreamHoldsBackOnlyWhatMayBeACall) {
  ToolCallStream s;
  std::string out;
  for (const char* piece : {"Sure", ", I will <", "b>check</b> <tool", "_call>{\"name\"", "...</tool_call>"})
    out += s.push(piece);
  EXPECT_EQ(out, "Sure, I will <b>check</b> ");
  EXPECT_EQ(s.held(), "<tool_call>{\"name\"...</tool_call>");
  ToolCallStream json_reply;
  EXPECT_EQ(json_reply.push("  {\"name\":"), "");
  EXPECT_EQ(json_reply.push(" \"f\"}"), "");
  EXPECT_EQ(json_reply.held(), "  {\"name\": \"f\"}");
  ToolCallStream bracket;
  EXPECT_EQ(bracket.push("[TOOL"), "");
  EXPECT_EQ(bracket.push("S] are"), "[TOOLS] are");
}

TEST(OpenAiRequest, ResponseFormatBecomesAConstraintOrANamed400) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"a"}],"response_format":)";
  EXPECT_TRUE(parse_chat_request(head + R"({"type":"text"}})", "m", 256, 4096).sampling.constraint.empty());
  EXPECT_EQ(parse_chat_request(head + R"({"type":"json_object"}})", "m", 256, 4096).sampling.constraint.kind,
            OutputConstraint::Kind::json_object);
  const ChatRequest r = parse_chat_request(
      head +
          R"({"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer"},"strict":true}}})",
      "m", 256, 4096);
  EXPECT_EQ(r.sampling.constraint, OutputConstraint::json_schema_of(R"({"type":"integer"})"));
  auto [status, e] =
      refusal(head + R"({"type":"json_schema","json_schema":{"schema":{"type":"string","format":"uri"}}}})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["param"], "response_format.json_schema.schema");
  EXPECT_NE(e["message"].get<std::string>().find("format 'uri' is not supported"), std::string::npos);
  EXPECT_EQ(refusal(head + R"({"type":"yaml"}})").second["param"], "response_format.type");
  EXPECT_EQ(refusal(head + R"({"type":"json_schema"}})").second["param"], "response_format.json_schema");
  EXPECT_EQ(refusal(head + R"({"type":"json_schema","json_schema":{"name":"x"}}})").second["param"],
            "response_format.json_schema.schema");
}

// A malformed body quoting bytes that are not UTF-8: the error message quotes them, and
// serializing it threw (nlohmann type_error 316). Now they become U+FFFD.
TEST(OpenAiRequest, MalformedBodyWithInvalidUtf8GetsAJsonError) {
  auto [status, e] = refusal("{\"model\":\"other\"\xff\xff\xff,\"messages\":[]}");
  EXPECT_EQ(status, 400);
  EXPECT_NE(e["message"].get<std::string>().find("not valid JSON"), std::string::npos);
  EXPECT_EQ(json_text(json("a\xff"
                           "b")),
            "\"a\xef\xbf\xbd"
            "b\"");
}

// A content part whose `type` is not a string, and stream options of the wrong types: `value()`
// threw type_error 302. Now each is a 400 naming the field.
TEST(OpenAiRequest, FieldsOfTheWrongTypeAre400s) {
  auto [s1, e1] = refusal(R"({"model":"m","messages":[{"role":"user","content":[{"type":1,"text":"a"}]}]})");
  EXPECT_EQ(s1, 400);
  EXPECT_EQ(e1["param"], "messages[0].content");
  auto [s2, e2] = refusal(
      R"({"model":"m","messages":[{"role":"user","content":"a"}],"stream_options":{"include_usage":"yes"}})");
  EXPECT_EQ(s2, 400);
  EXPECT_EQ(e2["param"], "stream_options.include_usage");
  auto [s3, e3] = refusal(R"({"model":"m","messages":[{"role":"user","content":"a"}],"stream_options":[1]})");
  EXPECT_EQ(s3, 400);
  EXPECT_EQ(e3["param"], "stream_options");
}

// Engine and batcher errors reach HTTP clients as a status and a code: the KV pool running out
// is the retryable 503.
TEST(OpenAiRequest, ErrorsMapToHttpStatusesAndCodes) {
  struct Case {
    Errc code;
    int status;
    const char* body_code;
  };
  for (const Case& c :
       {Case{Errc::out_of_memory, 503, "kv_cache_full"}, Case{Errc::not_found, 404, "not_found"},
        Case{Errc::invalid_argument, 400, "invalid_argument"}, Case{Errc::out_of_range, 400, "out_of_range"},
        Case{Errc::internal, 500, "internal"}, Case{Errc::io, 500, "io"}}) {
    const HttpError h = http_error(make_error(c.code, "what happened"));
    EXPECT_EQ(h.status, c.status) << errc_name(c.code);
    const auto j = nlohmann::json::parse(h.body);
    EXPECT_EQ(j["error"]["code"], c.body_code) << errc_name(c.code);
    EXPECT_EQ(j["error"]["message"], "what happened");
  }
}

}  // namespace
}  // namespace chorus
