// The timeline (engine/step/timeline.h): a trace read back into lanes — blocks in the order they
// began with their text whole, steps with their batch, roles' events, request spans — and the page
// it becomes; malformed files are refused with the event named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/step/timeline.h"
#include "engine/step/trace.h"

namespace chorus {
namespace {

using json = nlohmann::json;

// A trace as the engine and `chorus run` record one: two blocks written in turn, three steps.
std::string small_trace() {
  Trace t;
  t.name_lane(2, 7, "thoughts (7)");
  t.name_lane(2, 4, "notes (4)");
  t.name_lane(3, 0, "thinker_writer");
  t.async_begin("request", "generate", 1, 1000, "{\"block\":7,\"tokens\":5}");
  t.complete("engine", "step", 1, 0, 1000, 400,
             "{\"step\":1,\"decode\":0,\"probe\":0,\"prefill\":5,\"requests\":[]}");
  t.instant("block", "append", 2, 7, 1400, "{\"tokens\":5,\"length\":5,\"text\":\"Why is\"}");
  t.complete("engine", "step", 1, 0, 1500, 300,
             "{\"step\":2,\"decode\":1,\"probe\":2,\"prefill\":3,\"requests\":[]}");
  t.instant("block", "append", 2, 7, 1800, "{\"tokens\":1,\"length\":6,\"text\":\" the sky\"}");
  t.instant("block", "append", 2, 4, 1800, "{\"tokens\":3,\"length\":3,\"text\":\"It </script> is\"}");
  t.instant("role", "paragraph", 3, 0, 1850, "{\"text\":\"Why is the sky\"}");
  t.instant("memory", "pause", 1, 1, 1900, "{\"blocks\":[4,7],\"mode\":\"offload\"}");
  t.complete("engine", "step", 1, 0, 2000, 500,
             "{\"step\":3,\"decode\":1,\"probe\":0,\"prefill\":0,\"requests\":[]}");
  t.instant("block", "append", 2, 4, 2500, "{\"tokens\":1,\"length\":4,\"text\":\" blue\"}");
  t.async_end("request", "generate", 1, 2500, "{\"reason\":\"stop\",\"generated\":2}");
  return t.json();
}

TEST(Timeline, ReadsBlocksStepsEventsAndSpans) {
  auto s = summarize_trace(small_trace());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_DOUBLE_EQ(s->seconds, 0.0015);  // 1000 us to the last step's end at 2500
  EXPECT_EQ(s->events, 11);
  EXPECT_EQ(s->steps, 3);
  EXPECT_EQ(s->decode_tokens, 2);
  EXPECT_EQ(s->prefill_tokens, 8);
  EXPECT_EQ(s->probe_tokens, 2);
  EXPECT_EQ(s->requests, 1);
  EXPECT_EQ(s->role_events, 1);
  EXPECT_EQ(s->memory_events, 1);
  ASSERT_EQ(s->blocks.size(), 2u);
  // By first append: block 7 began at 400 us, block 4 at 800 us, though 4 < 7.
  EXPECT_EQ(s->blocks[0].name, "thoughts (7)");
  EXPECT_EQ(s->blocks[0].tokens, 6);
  EXPECT_EQ(s->blocks[0].appends, 2);
  EXPECT_EQ(s->blocks[0].first_us, 400);
  EXPECT_EQ(s->blocks[0].text, "Why is the sky");
  EXPECT_EQ(s->blocks[1].name, "notes (4)");
  EXPECT_EQ(s->blocks[1].tokens, 4);
  EXPECT_EQ(s->blocks[1].text, "It </script> is blue");
  EXPECT_EQ(s->blocks[0].length, 6);  // its last append's
  EXPECT_EQ(s->blocks[1].length, 4);
  EXPECT_NE(describe(*s).find("thoughts (7)"), std::string::npos);
}

TEST(Timeline, PageCarriesTheLanesInlineAndSafely) {
  TimelineSummary s;
  auto page = timeline_html(small_trace(), "a <b> & c", &s);
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_EQ(s.blocks.size(), 2u);
  EXPECT_NE(page->find("<title>chorus timeline: a &lt;b> &amp; c</title>"), std::string::npos);
  // The data sits in one script element: a block's "</script>" must not end it.
  const size_t open = page->find("<script id=\"trace-data\" type=\"application/json\">");
  ASSERT_NE(open, std::string::npos);
  const size_t from = page->find('>', open) + 1, to = page->find("</script>", from);
  const json data = json::parse(page->substr(from, to - from));
  ASSERT_EQ(data["blocks"].size(), 2u);
  EXPECT_EQ(data["blocks"][0]["id"], 7);
  EXPECT_EQ(data["blocks"][1]["appends"][0][2], "It </script> is");
  EXPECT_EQ(data["steps"].size(), 3u);
  EXPECT_EQ(data["steps"][1], json({500, 300, 1, 3, 2}));  // t, dur, decode, prefill, probe
  EXPECT_EQ(data["programs"][0]["name"], "thinker_writer");
  EXPECT_EQ(data["requests"][0], json({0, 1500, "generate", 1, 7, "stop", 2}));
  EXPECT_EQ(data["memory"][0], json({900, "pause", "offload", "4,7"}));
  EXPECT_NE(page->find("<h1>chorus timeline: a &lt;b> &amp; c</h1>"), std::string::npos);
  EXPECT_EQ(page->find("@DATA@"), std::string::npos);
  EXPECT_EQ(page->find("@TITLE@"), std::string::npos);
}

TEST(Timeline, EmptyTraceIsAPageWithNoLanes) {
  auto s = summarize_trace(Trace().json());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->events, 0);
  EXPECT_TRUE(s->blocks.empty());
  EXPECT_TRUE(timeline_html(Trace().json(), "empty").ok());
}

TEST(Timeline, RefusesWhatIsNotATrace) {
  auto expect_refused = [](const std::string& text, const std::string& says) {
    auto s = summarize_trace(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.error().code, Errc::invalid_argument);
    EXPECT_NE(s.error().message.find(says), std::string::npos) << s.error().message;
    EXPECT_FALSE(timeline_html(text, "x").ok());
  };
  expect_refused("", "not JSON");
  expect_refused("{\"traceEvents\": [", "not JSON");
  expect_refused("{\"events\": []}", "no traceEvents");
  expect_refused("42", "no traceEvents");
  expect_refused("{\"traceEvents\": [{\"ph\":\"i\",\"ts\":1}, 7]}", "event 1");
  expect_refused(
      "{\"traceEvents\": [{\"ph\":\"X\",\"cat\":\"engine\",\"name\":\"step\",\"ts\":1,\"dur\":\"long\"}]}",
      "event 0");
  expect_refused("{\"traceEvents\": [{\"ph\":\"b\",\"cat\":\"request\",\"ts\":1,\"id\":\"seven\"}]}",
                 "event 0");
  expect_refused("{\"traceEvents\": [{\"ph\":5}]}", "event 0");
}

TEST(Timeline, ReadsABareEventListAndNumericSpanIds) {
  auto s = summarize_trace(
      "[{\"ph\":\"b\",\"cat\":\"request\",\"name\":\"probe\",\"ts\":10,\"id\":3},"
      "{\"ph\":\"e\",\"cat\":\"request\",\"name\":\"probe\",\"ts\":30,\"id\":3},"
      "{\"ph\":\"i\",\"cat\":\"block\",\"name\":\"append\",\"pid\":2,\"tid\":9,\"ts\":20,"
      "\"args\":{\"tokens\":2,\"text\":\"hi\"}}]");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->requests, 1);
  ASSERT_EQ(s->blocks.size(), 1u);
  EXPECT_EQ(s->blocks[0].name, "block 9");  // no thread_name record: named by its id
  EXPECT_EQ(s->blocks[0].text, "hi");
}

}  // namespace
}  // namespace chorus
