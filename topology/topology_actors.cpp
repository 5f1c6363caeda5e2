// The topology reader, part two: each kind of actor in `actors:` (thinker and writer, probe,
// source, sink). The file's other sections and the checks across it are in topology.cpp.
#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/output_constraint.h"
#include "topology/topology_loader.h"

namespace chorus::topology::detail {

bool Loader::has_tool(const std::string& name) {
  if (t.tool(name)) return true;
  if (name != kEditProgram) return false;
  Tool builtin;
  builtin.name = kEditProgram;
  builtin.description = "changes this program: the arguments are a patch of its blocks and actors";
  t.tools.push_back(std::move(builtin));
  return true;
}

void Loader::read_generator(Actor& a, const YAML::Node& n, const std::string& path) {
  const bool thinker = a.kind == Kind::thinker;
  r.keys(n, path,
         {"kind", "view", "writes", "prefill", "max_tokens", "stop", "sampling", "schema", "grammar", "emit",
          "to", "on", "after", "tools", "max_tool_calls", "fresh", "node"});
  read_view_and_writes(a, n, path, true);
  if (auto v = n["prefill"]) a.prefill = text(v, path + ".prefill", true);
  a.max_tokens = thinker ? 256 : 48;
  if (auto v = n["max_tokens"])
    a.max_tokens = static_cast<int>(r.integer(v, path + ".max_tokens", 1, 1 << 20));
  if (!thinker) a.stop = {"\n"};
  if (auto v = n["stop"]) {
    a.stop = r.strings(v, path + ".stop", 16);
    for (size_t i = 0; i < a.stop.size(); ++i)
      if (a.stop[i].empty()) r.fail(v, path + ".stop", "an empty stop string would stop at once");
  }
  a.sampling = read_sampling(r, n["sampling"], path + ".sampling");
  if (auto v = n["emit"]) {
    if (!v.IsSequence())
      r.fail(v, path + ".emit", "expected a list of {at: TEXT, event: NAME}, found " + Reader::shape(v));
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = path + ".emit[" + std::to_string(i) + "]";
      r.keys(v[i], p, {"at", "event"});
      Emit e;
      e.at = r.str(required(v[i], p, "at", "the text that ends a piece (e.g. \"\\n\\n\")"), p + ".at");
      if (e.at.empty()) r.fail(v[i], p + ".at", "must not be empty");
      e.event = r.name(required(v[i], p, "event", "the event's name"), p + ".event");
      a.emits.push_back(e);
    }
  }
  if (auto v = n["to"]) a.to = r.names(v, path + ".to");
  if (auto v = n["tools"]) {
    a.tools = r.names(v, path + ".tools", 64);
    for (size_t i = 0; i < a.tools.size(); ++i) {
      if (has_tool(a.tools[i])) continue;
      std::vector<std::string> known;
      for (const Tool& x : t.tools) known.push_back(x.name);
      r.fail(Reader::item(v, i), Reader::item_path(v, path + ".tools", i),
             "unknown tool \"" + a.tools[i] + "\" (tools: " + join(known) + ")", Errc::not_found);
    }
    a.stop.push_back("</tool_call>");  // a call ends the run; the result goes in, and it goes on
  }
  if (auto v = n["fresh"]) a.fresh = r.boolean(v, path + ".fresh");
  if (auto v = n["max_tool_calls"]) {
    if (a.tools.empty()) r.fail(v, path + ".max_tool_calls", "needs `tools: [...]`");
    a.max_tool_calls = static_cast<int>(r.integer(v, path + ".max_tool_calls", 0, 1000));
  }
  if (auto v = n["grammar"]) {
    if (n["schema"] || !a.tools.empty())
      r.fail(v, path + ".grammar", "`grammar:` constrains the whole output: not with `schema:` or `tools:`");
    a.grammar = r.str(v, path + ".grammar");
    a.sampling.constraint = OutputConstraint::gbnf_of(a.grammar);
    if (auto g = grammar_of(a.sampling.constraint); !g)
      r.fail(v, path + ".grammar", g.error().message, Errc::invalid_argument);
  } else if (auto v = n["schema"]) {
    if (!a.tools.empty())
      r.fail(v, path + ".schema",
             "a role with tools writes text and tool calls (their `parameters:` constrain the calls); "
             "`schema:` is for a role that writes only JSON");
    a.schema = read_schema(r, v, path + ".schema");
    a.sampling.constraint = OutputConstraint::json_schema_of(a.schema);
  } else if (std::any_of(a.tools.begin(), a.tools.end(),
                         [&](const std::string& n) { return !t.tool(n)->parameters.empty(); })) {
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();
    for (const std::string& name : a.tools) {
      const Tool& tool = *t.tool(name);
      tools.push_back(
          {{"name", name},
           {"parameters", tool.parameters.empty() ? nlohmann::ordered_json()
                                                  : nlohmann::ordered_json::parse(tool.parameters)}});
    }
    a.sampling.constraint = OutputConstraint::tool_calls_of(tools.dump());
    if (auto g = grammar_of(a.sampling.constraint); !g)
      r.fail(n, path + ".tools", g.error().message, Errc::invalid_argument);
  }
  read_triggers(a, n, path);
  if (!thinker && a.on.empty() && a.after.empty())
    r.fail(n, path,
           "a writer needs a trigger: `on: [event, ...]` (a piece per event) or `after: [...]` (one piece)");
}

void Loader::read_probe(Actor& a, const YAML::Node& n, const std::string& path) {
  r.keys(n, path,
         {"kind", "view", "question", "candidates", "fire_on", "threshold", "fires", "edge", "watch",
          "every_new_tokens", "every_ms", "on", "node"});
  read_view_and_writes(a, n, path, false);
  const YAML::Node q =
      required(n, path, "question", "the text asked after the view (e.g. \"Is anything wrong? Answer:\")");
  a.question = text(q, path + ".question", true);
  if (a.question.empty()) r.fail(q, path + ".question", "must not be empty");
  const YAML::Node c = required(n, path, "candidates",
                                "the answers whose probabilities are compared (e.g. [\" Yes\", \" No\"])");
  a.candidates = r.strings(c, path + ".candidates", 64);
  if (a.candidates.size() < 1) r.fail(c, path + ".candidates", "needs at least one candidate");
  for (size_t i = 0; i < a.candidates.size(); ++i)
    if (a.candidates[i].empty())
      r.fail(c, path + ".candidates", "candidate " + std::to_string(i) + " is empty");
  a.fire_on = {0};
  if (auto v = n["fire_on"]) {
    const auto fs = r.strings(v, path + ".fire_on", 64);
    a.fire_on.clear();
    for (size_t i = 0; i < fs.size(); ++i) {
      const auto it = std::find(a.candidates.begin(), a.candidates.end(), fs[i]);
      if (it == a.candidates.end()) {
        std::vector<std::string> quoted;
        for (const auto& s : a.candidates) quoted.push_back("\"" + s + "\"");
        r.fail(Reader::item(v, i), Reader::item_path(v, path + ".fire_on", i),
               "\"" + Reader::clip(fs[i]) + "\" is not a candidate (candidates: " + join(quoted) + ")");
      }
      a.fire_on.push_back(static_cast<int>(it - a.candidates.begin()));
    }
    if (a.fire_on.empty()) r.fail(v, path + ".fire_on", "needs at least one candidate");
  }
  if (auto v = n["threshold"]) a.threshold = static_cast<float>(r.number(v, path + ".threshold", 0, 1));
  a.fires = a.name + ".fired";
  if (auto v = n["fires"]) a.fires = r.name(v, path + ".fires");
  if (auto v = n["edge"]) a.edge = r.boolean(v, path + ".edge");
  if (auto v = n["watch"]) {
    a.watch = r.name(v, path + ".watch");
    check_block(v, path + ".watch", a.watch);
    a.every_new_tokens = 64;
  }
  if (auto v = n["every_new_tokens"]) {
    if (a.watch.empty())
      r.fail(v, path + ".every_new_tokens", "needs `watch: BLOCK` (the block whose new tokens are counted)");
    a.every_new_tokens = r.integer(v, path + ".every_new_tokens", 1, int64_t{1} << 40);
  }
  if (auto v = n["every_ms"]) a.every_ms = static_cast<int>(r.integer(v, path + ".every_ms", 1, 86400000));
  read_triggers(a, n, path);
  if (a.watch.empty() && a.every_ms == 0 && a.on.empty())
    r.fail(n, path,
           "a probe needs a trigger: `watch: BLOCK` (every_new_tokens), `every_ms: N` or `on: [event, ...]`");
}

void Loader::read_source(Actor& a, const YAML::Node& n, const std::string& path) {
  r.keys(n, path,
         {"kind", "view", "writes", "from", "every_lines", "emit", "max_lines", "keep_lines", "on",
          "delay_ms", "node"});
  const YAML::Node w = required(n, path, "writes", "the block the text goes into");
  a.writes = r.name(w, path + ".writes");
  check_block(w, path + ".writes", a.writes);
  if (auto v = n["view"]) {
    a.view = block_list(v, path + ".view");
    if (a.view.empty() || a.view.back() != a.writes)
      r.fail(v, path + ".view", "a source's view ends with the block it writes");
  } else {
    a.view = {a.writes};
  }
  const YAML::Node from =
      required(n, path, "from", "stdin, api, {file: PATH}, {zmq: ENDPOINT} or {text: TEXT}");
  const std::string fp = path + ".from";
  if (from.IsScalar()) {
    const std::string s = from.Scalar();
    if (s == "stdin")
      a.from = SourceKind::stdin_lines;
    else if (s == "api")
      a.from = SourceKind::api;
    else
      r.fail(from, fp,
             "unknown source \"" + Reader::clip(s) +
                 "\" (stdin, api, {file: PATH}, {zmq: ENDPOINT}, {text: TEXT})");
  } else {
    r.keys(from, fp, {"file", "follow", "zmq", "topic", "text"});
    const int given = (from["file"] ? 1 : 0) + (from["zmq"] ? 1 : 0) + (from["text"] ? 1 : 0);
    if (given != 1) r.fail(from, fp, "give exactly one of file, zmq, text");
    if (auto v = from["file"]) {
      a.from = SourceKind::file;
      a.path = text(v, fp + ".file");
      if (a.path.empty()) r.fail(v, fp + ".file", "must not be empty");
      if (auto f = from["follow"]) a.follow = r.boolean(f, fp + ".follow");
    } else if (auto v = from["zmq"]) {
      a.from = SourceKind::zmq;
      a.endpoint = text(v, fp + ".zmq");
      if (a.endpoint.find("://") == std::string::npos)
        r.fail(v, fp + ".zmq", "expected an endpoint such as tcp://127.0.0.1:5556");
      if (auto tp = from["topic"]) a.topic = r.str(tp, fp + ".topic");
    } else {
      a.from = SourceKind::text;
      a.text = text(from["text"], fp + ".text");
    }
    if (a.from != SourceKind::file && from["follow"])
      r.fail(from["follow"], fp + ".follow", "only for a file");
    if (a.from != SourceKind::zmq && from["topic"]) r.fail(from["topic"], fp + ".topic", "only for zmq");
  }
  if (auto v = n["every_lines"])
    a.every_lines = static_cast<int>(r.integer(v, path + ".every_lines", 1, 1 << 20));
  if (auto v = n["emit"]) a.emit_event = r.name(v, path + ".emit");
  if ((a.every_lines > 0) != !a.emit_event.empty())
    r.fail(n, path, "`every_lines: N` and `emit: EVENT` go together (the event fires every N lines)");
  if (auto v = n["max_lines"]) a.max_lines = r.integer(v, path + ".max_lines", 1, int64_t{1} << 40);
  if (auto v = n["keep_lines"]) {
    a.keep_lines = r.integer(v, path + ".keep_lines", 1, int64_t{1} << 30);
    if (a.keep_lines < 2 * a.every_lines)
      r.fail(v, path + ".keep_lines",
             "must be at least twice every_lines (" + std::to_string(a.every_lines) +
                 "): the last every_lines lines are kept when the window is cleared");
  }
  read_triggers(a, n, path);
  if (auto v = n["delay_ms"]) a.delay_ms = static_cast<int>(r.integer(v, path + ".delay_ms", 0, 86400000));
  if (a.from != SourceKind::text && (!a.on.empty() || !a.after.empty() || n["delay_ms"]))
    r.fail(n, path, "`on`, `after` and `delay_ms` are for a source of text ({text: ...})");
}

void Loader::read_sink(Actor& a, const YAML::Node& n, const std::string& path) {
  r.keys(n, path, {"kind", "to", "prefix", "on", "node"});
  const YAML::Node to = required(n, path, "to", "stdout, stderr, callback, {file: PATH} or {zmq: ENDPOINT}");
  const std::string tp = path + ".to";
  if (to.IsScalar()) {
    const std::string s = to.Scalar();
    if (s == "stdout")
      a.sink = SinkKind::stdout_stream;
    else if (s == "stderr")
      a.sink = SinkKind::stderr_stream;
    else if (s == "callback")
      a.sink = SinkKind::callback;
    else
      r.fail(to, tp,
             "unknown sink \"" + Reader::clip(s) +
                 "\" (stdout, stderr, callback, {file: PATH}, {zmq: ENDPOINT})");
  } else {
    r.keys(to, tp, {"file", "zmq", "topic"});
    if ((to["file"] ? 1 : 0) + (to["zmq"] ? 1 : 0) != 1) r.fail(to, tp, "give exactly one of file, zmq");
    if (auto v = to["file"]) {
      a.sink = SinkKind::file;
      a.path = text(v, tp + ".file");
      if (a.path.empty()) r.fail(v, tp + ".file", "must not be empty");
    } else {
      a.sink = SinkKind::zmq;
      a.endpoint = text(to["zmq"], tp + ".zmq");
      if (a.endpoint.find("://") == std::string::npos)
        r.fail(to["zmq"], tp + ".zmq", "expected an endpoint such as tcp://127.0.0.1:5557");
      if (auto t2 = to["topic"]) a.topic = r.str(t2, tp + ".topic");
    }
  }
  if (auto v = n["prefix"]) a.prefix = r.str(v, path + ".prefix");
  if (auto v = n["on"]) a.on = r.names(v, path + ".on");
}

}  // namespace chorus::topology::detail
