// The trace (engine/step/trace.h): a bounded ring, JSON that parses, and what the engine records
// into it — steps with their batch, request spans, block appends with their text, pauses.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "device/cpu_device.h"
#include "engine/step/engine.h"
#include "engine/step/trace.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

using json = nlohmann::json;

TEST(Trace, KeepsTheNewestEventsAndCountsTheDropped) {
  Trace t(3);
  for (int i = 0; i < 5; ++i) t.instant("c", "e" + std::to_string(i), 1, 0, i);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.dropped(), 2);
  const json j = json::parse(t.json());
  EXPECT_EQ(j["otherData"]["dropped"], 2);
  std::vector<std::string> names;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "i") names.push_back(e["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"e2", "e3", "e4"}));
}

TEST(Trace, QuotesAnyTextIntoValidJson) {
  const std::string weird = std::string("a\"b\\c\n\x01 caf\xc3\xa9 ") + "\xff\xc3" + " \xe2\x82\xac";
  const json back = json::parse(Trace::quote(weird));
  EXPECT_EQ(back.get<std::string>(), "a\"b\\c\n\x01 caf\xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd \xe2\x82\xac");
}

TEST(Trace, RecordsStepsRequestsAppendsAndPauses) {
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuDevice> device;
  ASSERT_NO_FATAL_FAILURE(test::load_model(test::goldens_dir() + "/tiny_llama_f32.gguf", &model, &device));
  auto trace = std::make_shared<Trace>();
  EngineOptions o;
  o.trace = trace;
  auto e = Engine::create(*model, *device, o);
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  Engine& engine = **e;
  const BlockId w = engine.blocks().create("answer");
  StopCondition stop;
  stop.max_tokens = 5;
  stop.at_end_of_generation = false;
  auto id = engine.submit(Request::generate(w, {w}, {1, 2, 3, 4, 5, 6, 7}, SamplingParams::greedy(), stop));
  ASSERT_TRUE(id.ok());
  std::vector<TokenId> generated;
  while (!engine.idle()) {
    auto ev = engine.step();
    ASSERT_TRUE(ev.ok());
    for (const Event& x : *ev)
      if (x.type == Event::Type::token) generated.push_back(x.token);
  }
  ASSERT_TRUE(engine.pause(std::vector<BlockId>{w}, PauseMode::drop).ok());

  const json j = json::parse(trace->json());
  int steps = 0, decode = 0, prefill = 0, begins = 0, ends = 0, appended = 0, pauses = 0;
  std::string lane;
  std::vector<std::string> texts;
  for (const json& ev : j["traceEvents"]) {
    if (ev["ph"] == "X" && ev["name"] == "step") {
      ++steps;
      decode += ev["args"]["decode"].get<int>();
      prefill += ev["args"]["prefill"].get<int>();
      EXPECT_GE(ev["dur"].get<int64_t>(), 0);
      for (const json& r : ev["args"]["requests"]) EXPECT_EQ(r["request"], *id);
    }
    if (ev["ph"] == "b" && ev["cat"] == "request") ++begins;
    if (ev["ph"] == "e" && ev["cat"] == "request") {
      ++ends;
      EXPECT_EQ(ev["args"]["reason"], "max_tokens");
      EXPECT_EQ(ev["args"]["generated"], 5);
    }
    if (ev["ph"] == "i" && ev["name"] == "append" && ev["tid"] == w) {
      appended += ev["args"]["tokens"].get<int>();
      texts.push_back(ev["args"]["text"].get<std::string>());
    }
    if (ev["ph"] == "i" && ev["name"] == "pause") {
      ++pauses;
      EXPECT_EQ(ev["args"]["blocks"], json::array({w}));
      EXPECT_EQ(ev["args"]["mode"], "drop");
    }
    if (ev["ph"] == "M" && ev["name"] == "thread_name" && ev["pid"] == 2 && ev["tid"] == w)
      lane = ev["args"]["name"];
  }
  EXPECT_EQ(steps, engine.steps());
  EXPECT_EQ(prefill, 7);         // the prompt, in one step
  EXPECT_EQ(decode, steps - 1);  // then one token a step
  EXPECT_GE(decode, 4);          // each generated token but the last (and maybe the last: drained)
  EXPECT_EQ(begins, 1);
  EXPECT_EQ(ends, 1);
  EXPECT_EQ(appended, 7 + 5);  // the block's log: the prompt, then each token as it was drawn
  // One append per step: the prompt with the first token drawn after it, then a token a step.
  ASSERT_EQ(texts.size(), 5u);
  ASSERT_EQ(generated.size(), 5u);
  // (Each append's text is valid UTF-8: bytes of a character split across steps become U+FFFD.)
  auto as_json = [](const std::string& s) { return json::parse(Trace::quote(s)).get<std::string>(); };
  EXPECT_EQ(texts[0],
            as_json(model->tokenizer.decode(std::vector<TokenId>{1, 2, 3, 4, 5, 6, 7, generated[0]})));
  EXPECT_EQ(texts[1], as_json(model->tokenizer.decode(std::vector<TokenId>{generated[1]})));
  EXPECT_EQ(lane, "answer (" + std::to_string(w) + ")");
  EXPECT_EQ(pauses, 1);
}

}  // namespace
}  // namespace chorus
