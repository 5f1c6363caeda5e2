// The timeline of a trace: its events read back into lanes (summarize_trace), and the page that
// shows them (timeline_html; the page itself is in timeline_page.cpp).
#include "engine/step/timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace chorus {

extern const char* const kTimelinePage;  // timeline_page.cpp

namespace {

using nlohmann::json;

// What the page draws, with times in microseconds since the trace's first event.
struct Timeline {
  TimelineSummary summary;
  json blocks = json::array(), programs = json::array(), steps = json::array(), memory = json::array(),
       requests = json::array();
};

int64_t int_of(const json& args, const char* key) {
  const auto it = args.find(key);
  return it != args.end() && it->is_number() ? it->get<int64_t>() : 0;
}

std::string text_of(const json& args, const char* key) {
  const auto it = args.find(key);
  return it != args.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A span's id: chorus writes it as a string ("7"), other writers as a number.
int64_t id_of(const json& e) {
  const auto it = e.find("id");
  if (it == e.end()) return 0;
  return it->is_string() ? std::stoll(it->get<std::string>()) : it->get<int64_t>();
}

struct Lanes {
  std::map<std::pair<int64_t, int64_t>, std::string> names;       // (pid, tid) -> thread_name
  std::map<int64_t, json> block_appends, role_events, tool_runs;  // tid -> [[t, ...], ...]
  std::map<int64_t, std::pair<int64_t, json>> spans;              // request id -> (begin, its args)
};

// One event into the lanes. Throws json's type errors on a field of the wrong type.
void read_event(const json& e, int64_t t0, Lanes& lanes, Timeline& tl) {
  const std::string ph = e.value("ph", "");
  const std::string cat = e.value("cat", ""), name = e.value("name", "");
  const int64_t pid = e.value("pid", int64_t{0}), tid = e.value("tid", int64_t{0});
  const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
  if (ph == "M") {
    if (name == "thread_name") lanes.names[{pid, tid}] = text_of(args, "name");
    return;
  }
  const int64_t t = static_cast<int64_t>(e.value("ts", 0.0)) - t0;
  TimelineSummary& s = tl.summary;
  ++s.events;
  if (ph == "X" && cat == "engine" && name == "step") {
    const int64_t decode = int_of(args, "decode"), probe = int_of(args, "probe"),
                  prefill = int_of(args, "prefill");
    tl.steps.push_back({t, static_cast<int64_t>(e.value("dur", 0.0)), decode, prefill, probe});
    ++s.steps;
    s.decode_tokens += decode, s.prefill_tokens += prefill, s.probe_tokens += probe;
  } else if (ph == "i" && cat == "block") {
    lanes.block_appends[tid].push_back(
        {t, int_of(args, "tokens"), text_of(args, "text"), int_of(args, "length")});
  } else if (ph == "i" && cat == "role") {
    lanes.role_events[tid].push_back({t, name, text_of(args, "text")});
    ++s.role_events;
  } else if (ph == "X" && cat == "tool" && pid == 3) {
    lanes.tool_runs[tid].push_back(
        {t, static_cast<int64_t>(e.value("dur", 0.0)), name, text_of(args, "ended")});
    lanes.role_events.try_emplace(tid, json::array());  // a lane even without events
  } else if (ph == "i" && cat == "memory") {
    std::string blocks;
    if (args.contains("blocks") && args["blocks"].is_array())
      for (const json& b : args["blocks"]) blocks += (blocks.empty() ? "" : ",") + b.dump();
    tl.memory.push_back({t, name, text_of(args, "mode"), blocks});
    ++s.memory_events;
  } else if (ph == "b" && cat == "request") {
    lanes.spans[id_of(e)] = {t, args};
    ++s.requests;
  } else if (ph == "e" && cat == "request") {
    const int64_t id = id_of(e);
    const auto it = lanes.spans.find(id);
    if (it == lanes.spans.end()) return;  // begun before the ring's oldest event
    tl.requests.push_back({it->second.first, t, name, id, int_of(it->second.second, "block"),
                           text_of(args, "reason"), int_of(args, "generated")});
    lanes.spans.erase(it);
  }
}

// The lanes, named and ordered: blocks by their first append, programs by lane.
void gather(Lanes& lanes, Timeline& tl) {
  for (auto& [tid, appends] : lanes.block_appends) {
    TimelineBlock b;
    b.id = tid;
    const auto name = lanes.names.find({2, tid});
    b.name = name != lanes.names.end() ? name->second : "block " + std::to_string(tid);
    b.appends = static_cast<int64_t>(appends.size());
    b.first_us = appends.empty() ? 0 : appends[0][0].get<int64_t>();
    for (const json& a : appends) b.tokens += a[1].get<int64_t>(), b.text += a[2].get<std::string>();
    b.length = appends.empty() ? 0 : appends.back()[3].get<int64_t>();
    tl.summary.blocks.push_back(b);
  }
  std::stable_sort(tl.summary.blocks.begin(), tl.summary.blocks.end(),
                   [](const TimelineBlock& a, const TimelineBlock& b) { return a.first_us < b.first_us; });
  for (const TimelineBlock& b : tl.summary.blocks)
    tl.blocks.push_back({{"id", b.id},
                         {"name", b.name},
                         {"tokens", b.tokens},
                         {"length", b.length},
                         {"appends", std::move(lanes.block_appends[b.id])}});
  for (auto& [tid, events] : lanes.role_events) {
    const auto name = lanes.names.find({3, tid});
    auto tools = lanes.tool_runs.find(tid);
    tl.programs.push_back(
        {{"lane", tid},
         {"name", name != lanes.names.end() ? name->second : "program " + std::to_string(tid)},
         {"events", std::move(events)},
         {"tools", tools != lanes.tool_runs.end() ? std::move(tools->second) : json::array()}});
  }
}

Result<Timeline> read_timeline(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error(Errc::invalid_argument, "not a trace: the file is not JSON");
  const json* events = doc.is_array() ? &doc : nullptr;
  if (doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array())
    events = &doc["traceEvents"];
  if (!events) return make_error(Errc::invalid_argument, "not a trace: no traceEvents list");
  Timeline tl;
  if (doc.is_object() && doc.contains("otherData") && doc["otherData"].is_object())
    tl.summary.dropped = int_of(doc["otherData"], "dropped");
  int64_t t0 = INT64_MAX, t1 = 0;
  for (const json& e : *events)
    if (e.is_object() && !(e.contains("ph") && e["ph"] == "M") && e.contains("ts") && e["ts"].is_number()) {
      const auto ts = static_cast<int64_t>(e["ts"].get<double>());
      const auto dur =
          e.contains("dur") && e["dur"].is_number() ? static_cast<int64_t>(e["dur"].get<double>()) : 0;
      t0 = std::min(t0, ts), t1 = std::max(t1, ts + dur);
    }
  if (t0 == INT64_MAX) t0 = t1 = 0;
  Lanes lanes;
  for (size_t i = 0; i < events->size(); ++i) {
    const json& e = (*events)[i];
    try {
      if (!e.is_object()) throw std::invalid_argument("not an object");
      read_event(e, t0, lanes, tl);
    } catch (const std::exception& x) {
      return make_error(Errc::invalid_argument,
                        "malformed trace: event " + std::to_string(i) + ": " + x.what());
    }
  }
  gather(lanes, tl);
  tl.summary.seconds = static_cast<double>(t1 - t0) * 1e-6;
  return tl;
}

}  // namespace

Result<TimelineSummary> summarize_trace(const std::string& json_text) {
  auto tl = read_timeline(json_text);
  if (!tl) return tl.error();
  return std::move(tl->summary);
}

Result<std::string> timeline_html(const std::string& json_text, const std::string& title,
                                  TimelineSummary* summary) {
  auto tl = read_timeline(json_text);
  if (!tl) return tl.error();
  const TimelineSummary& s = tl->summary;
  if (summary) *summary = s;
  json data = {{"title", title},
               {"duration_us", static_cast<int64_t>(s.seconds * 1e6)},
               {"dropped", s.dropped},
               {"blocks", std::move(tl->blocks)},
               {"programs", std::move(tl->programs)},
               {"steps", std::move(tl->steps)},
               {"memory", std::move(tl->memory)},
               {"requests", std::move(tl->requests)}};
  std::string inline_json = data.dump(-1, ' ', false, json::error_handler_t::replace);
  // Inside <script>, "</" could end the element: JSON lets "/" be escaped.
  for (size_t at = 0; (at = inline_json.find("</", at)) != std::string::npos; at += 3)
    inline_json.replace(at, 2, "<\\/");
  std::string page = kTimelinePage;
  std::string safe_title;
  for (char c : title) safe_title += c == '<' ? "&lt;" : c == '&' ? "&amp;" : std::string(1, c);
  for (const auto& [mark, value] : {std::pair<std::string, const std::string*>{"@TITLE@", &safe_title},
                                    std::pair<std::string, const std::string*>{"@DATA@", &inline_json}}) {
    for (size_t at = 0; (at = page.find(mark, at)) != std::string::npos; at += value->size())
      page.replace(at, mark.size(), *value);
  }
  return page;
}

std::string describe(const TimelineSummary& s) {
  char line[256];
  std::snprintf(
      line, sizeof line,
      "%.3f s, %lld events (%lld dropped), %lld steps: %lld decode, %lld prefill, %lld probe tokens; "
      "%lld requests, %lld role events, %lld pauses/restores\n",
      s.seconds, static_cast<long long>(s.events), static_cast<long long>(s.dropped),
      static_cast<long long>(s.steps), static_cast<long long>(s.decode_tokens),
      static_cast<long long>(s.prefill_tokens), static_cast<long long>(s.probe_tokens),
      static_cast<long long>(s.requests), static_cast<long long>(s.role_events),
      static_cast<long long>(s.memory_events));
  std::string out = line;
  for (const TimelineBlock& b : s.blocks) {
    std::snprintf(line, sizeof line, "  block %-28s %6lld tokens in %5lld appends from %.3f s; holds %lld\n",
                  b.name.c_str(), static_cast<long long>(b.tokens), static_cast<long long>(b.appends),
                  static_cast<double>(b.first_us) * 1e-6, static_cast<long long>(b.length));
    out += line;
  }
  return out;
}

}  // namespace chorus
