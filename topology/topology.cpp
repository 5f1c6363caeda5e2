#include "topology/topology.h"

#include <nlohmann/json.hpp>

#include "engine/grammar/output_constraint.h"
#include "topology/topology_loader.h"
#include "topology/yaml_reader.h"

#include <yaml-cpp/yaml.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace chorus::topology {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::thinker: return "thinker";
    case Kind::writer: return "writer";
    case Kind::probe: return "probe";
    case Kind::source: return "source";
    case Kind::sink: return "sink";
  }
  return "?";
}

bool Tool::builtin() const {
  return name == kEditProgram;
}

std::string Placement::describe() const {
  if (!node.empty()) return "node `" + node + "`";
  if (!label.empty()) return "a node labelled " + label;
  return "its program's node";
}

std::string Tool::access() const {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (network) add("network");
  for (const auto& p : read) add("reads " + p);
  for (const auto& p : write) add("writes " + p);
  if (!env.empty()) {
    std::string names;
    for (const auto& [k, v] : env) names += (names.empty() ? "" : " ") + k;
    add("env " + names);
  }
  return s;
}

const Block* Topology::block(const std::string& n) const {
  for (const Block& b : blocks)
    if (b.name == n) return &b;
  return nullptr;
}

const Actor* Topology::actor(const std::string& n) const {
  for (const Actor& a : actors)
    if (a.name == n) return &a;
  return nullptr;
}

const Tool* Topology::tool(const std::string& n) const {
  for (const Tool& t : tools)
    if (t.name == n) return &t;
  return nullptr;
}

std::map<std::string, std::vector<std::string>> Topology::emitters() const {
  std::map<std::string, std::vector<std::string>> out;
  auto add = [&](const std::string& ev, const std::string& who) {
    auto& v = out[ev];
    if (std::find(v.begin(), v.end(), who) == v.end()) v.push_back(who);
  };
  for (const Actor& a : actors) {
    if (a.kind == Kind::sink) continue;
    add(a.name + ".done", a.name);
    for (const Emit& e : a.emits) add(e.event, a.name);
    for (const std::string& tool : a.tools) {
      if (tool == kEditProgram) {
        add(a.name + ".edit_program", a.name);  // the patch it asks for (its result: program.patched...)
        continue;
      }
      add(a.name + ".tool_call", a.name);
      add(a.name + ".tool_result", a.name);
    }
    if (a.kind == Kind::probe) add(a.fires, a.name);
    if (a.kind == Kind::source && !a.emit_event.empty()) add(a.emit_event, a.name);
  }
  return out;
}

namespace {

using namespace detail;

// Replaces every {{name}} in `s` by its parameter; unknown names are errors.
std::string substitute(const Reader& r, const YAML::Node& at, const std::string& path, const std::string& s,
                       const std::map<std::string, std::string>& params, const std::set<std::string>& unset,
                       bool require, bool event) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t open = s.find("{{", i);
    if (open == std::string::npos) break;
    const size_t close = s.find("}}", open + 2);
    if (close == std::string::npos) r.fail(at, path, "\"{{\" without a closing \"}}\"");
    std::string key = s.substr(open + 2, close - open - 2);
    key.erase(0, key.find_first_not_of(' '));
    key.erase(key.find_last_not_of(' ') + 1);
    if (key == "event") {
      if (!event)
        r.fail(at, path,
               "{{event}} is only for a prefill or a probe's question (the text of the event that starts the "
               "run)");
      out += s.substr(i, close + 2 - i);
      i = close + 2;
      continue;
    }
    auto it = params.find(key);
    if (it == params.end()) {
      std::vector<std::string> known;
      for (const auto& [k, v] : params) known.push_back(k);
      r.fail(at, path, "unknown parameter \"" + Reader::clip(key) + "\" (params: " + join(known) + ")",
             Errc::not_found);
    }
    if (unset.count(key) && require)
      r.fail(at, path,
             "parameter \"" + key + "\" has no value: give one with --set " + key + "=..." +
                 (key == "input" ? " or --input" : ""));
    out += s.substr(i, open - i) + it->second;
    i = close + 2;
  }
  return out + s.substr(i);
}

// A key path "a.b.c" into `root`; the leaf is created when missing, the rest must exist.
void apply_set(YAML::Node root, const std::string& key, const std::string& value) {
  std::vector<std::string> parts;
  for (size_t i = 0;;) {
    const size_t dot = key.find('.', i);
    parts.push_back(key.substr(i, dot - i));
    if (dot == std::string::npos) break;
    i = dot + 1;
  }
  YAML::Node cur;
  cur.reset(root);
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path += (i ? "." : "") + parts[i];
    if (!cur.IsMap() || !cur[parts[i]])
      throw LoadError{make_error(Errc::not_found, "--set " + key + ": no " + path + " in the file")};
    YAML::Node next = cur[parts[i]];
    cur.reset(next);
  }
  if (!cur.IsMap())
    throw LoadError{make_error(Errc::invalid_argument, "--set " + key + ": " + path + " is not a mapping")};
  cur[parts.back()] = value;
}

}  // namespace

namespace detail {

SamplingParams read_sampling(const Reader& r, const YAML::Node& n, const std::string& path) {
  SamplingParams s;
  s.temperature = 0.0f;  // a topology is greedy unless it says otherwise: reproducible runs
  if (!n) return s;
  r.keys(n, path, {"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed"});
  if (auto v = n["temperature"])
    s.temperature = static_cast<float>(r.number(v, path + ".temperature", 0, 10));
  if (auto v = n["top_k"]) s.top_k = static_cast<int>(r.integer(v, path + ".top_k", 0, 1 << 20));
  if (auto v = n["top_p"]) s.top_p = static_cast<float>(r.number(v, path + ".top_p", 0, 1));
  if (auto v = n["min_p"]) s.min_p = static_cast<float>(r.number(v, path + ".min_p", 0, 1));
  if (auto v = n["repeat_penalty"])
    s.repeat_penalty = static_cast<float>(r.number(v, path + ".repeat_penalty", 0.01, 100));
  if (auto v = n["repeat_last_n"])
    s.repeat_last_n = static_cast<int>(r.integer(v, path + ".repeat_last_n", 0, 1 << 20));
  if (auto v = n["seed"]) s.seed = static_cast<uint64_t>(r.integer(v, path + ".seed", 0, INT64_MAX));
  return s;
}

namespace {

// YAML as JSON: quoted scalars are strings; plain ones true/false, null (~, empty), numbers,
// else strings.
nlohmann::ordered_json json_of(const Reader& r, const YAML::Node& n, const std::string& path) {
  if (n.IsMap()) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string k = r.str(it->first, path);
      o[k] = json_of(r, it->second, path + "." + k);
    }
    return o;
  }
  if (n.IsSequence()) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (size_t i = 0; i < n.size(); ++i) a.push_back(json_of(r, n[i], path + "[" + std::to_string(i) + "]"));
    return a;
  }
  if (!n.IsScalar() || n.Tag() == "!")
    return n.IsScalar() ? nlohmann::ordered_json(n.Scalar()) : nlohmann::ordered_json();
  const std::string& v = n.Scalar();
  if (v == "true" || v == "True") return true;
  if (v == "false" || v == "False") return false;
  if (v.empty() || v == "~" || v == "null" || v == "Null") return nullptr;
  const auto num = nlohmann::ordered_json::parse(v, nullptr, false);
  if (!num.is_discarded() && num.is_number()) return num;
  return v;
}

}  // namespace

std::string read_schema(const Reader& r, const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) r.fail(n, path, "expected a JSON Schema (a mapping), found " + Reader::shape(n));
  std::string text;
  try {
    text = json_of(r, n, path).dump();
  } catch (
      const nlohmann::ordered_json::type_error& e) {  // (found by topology_fuzz) a string that is not UTF-8
    r.fail(n, path, std::string("a JSON Schema is UTF-8 text: ") + e.what());
  }
  if (auto g = grammar_of(OutputConstraint::json_schema_of(text)); !g)
    r.fail(n, path, g.error().message, Errc::invalid_argument);
  return text;
}

Error yaml_error(const std::string& label, const YAML::Exception& e) {
  // yaml-cpp's guard against deep nesting reports "bad file"; say what it means.
  const std::string what = e.msg == "bad file" ? "nested too deeply (yaml-cpp stops at 500 levels)" : e.msg;
  if (e.mark.is_null()) return make_error(Errc::bad_format, label + ": " + what);
  return make_error(Errc::bad_format, label + ":" + std::to_string(e.mark.line + 1) + ":" +
                                          std::to_string(e.mark.column + 1) + ": " + what);
}

std::string Loader::text(const YAML::Node& n, const std::string& path, bool event) {
  // Patching: what the program had is text already substituted (it has no mark: it was not read
  // from the patch); only what the patch wrote has {{params}} to substitute.
  if (patching && n.Mark().is_null()) return r.str(n, path);
  return substitute(r, n, path, r.str(n, path), params, unset, opts.require_params, event);
}

void Loader::read(const YAML::Node& root) {
  r.keys(
      root, "(top level)",
      {"name", "description", "model", "engine", "params", "budget", "finish", "blocks", "tools", "actors"});
  if (auto n = root["name"]) t.name = r.name(n, "name");
  if (auto n = root["description"]) t.description = r.str(n, "description");
  if (auto n = root["model"]) {
    t.model = r.str(n, "model");
    if (t.model == "default") t.model.clear();
  }
  if (auto e = root["engine"]) {
    r.keys(e, "engine", {"threads", "pages", "token_budget", "max_view_tokens", "linear_slots"});
    if (auto v = e["threads"]) t.engine.threads = static_cast<int>(r.integer(v, "engine.threads", 0, 1024));
    if (auto v = e["pages"]) t.engine.pages = r.integer(v, "engine.pages", 16, int64_t{1} << 24);
    if (auto v = e["token_budget"])
      t.engine.token_budget = static_cast<int>(r.integer(v, "engine.token_budget", 1, 1 << 16));
    if (auto v = e["max_view_tokens"])
      t.engine.max_view_tokens = r.integer(v, "engine.max_view_tokens", 16, int64_t{1} << 22);
    if (auto v = e["linear_slots"])
      t.engine.linear_slots = static_cast<int>(r.integer(v, "engine.linear_slots", 0, 1 << 16));
  }
  read_params(root["params"]);
  if (auto b = root["budget"]) {
    r.keys(b, "budget", {"seconds", "tokens"});
    if (auto v = b["seconds"]) t.budget_seconds = r.number(v, "budget.seconds", 0, 1e7);
    if (auto v = b["tokens"]) t.budget_tokens = r.integer(v, "budget.tokens", 0, int64_t{1} << 40);
  }
  const YAML::Node blocks = root["blocks"];
  if (!blocks) r.fail(root, "blocks", "missing: a topology needs at least one block");
  r.map(blocks, "blocks");
  if (blocks.size() == 0 || blocks.size() > 1024) r.fail(blocks, "blocks", "expected 1 to 1024 blocks");
  for (auto it = blocks.begin(); it != blocks.end(); ++it) read_block_name(it->first);
  for (auto it = blocks.begin(); it != blocks.end(); ++it) read_block(it->first.Scalar(), it->second);
  if (auto tools = root["tools"]) read_tools(tools);
  const YAML::Node actors = root["actors"];
  if (!actors) r.fail(root, "actors", "missing: a topology needs at least one actor");
  r.map(actors, "actors");
  if (actors.size() == 0 || actors.size() > 256) r.fail(actors, "actors", "expected 1 to 256 actors");
  for (auto it = actors.begin(); it != actors.end(); ++it) {
    Actor a;
    a.name = r.name(it->first, "actors");
    if (t.actor(a.name)) r.fail(it->first, "actors." + a.name, "declared twice");
    if (t.block(a.name)) r.fail(it->first, "actors." + a.name, "an actor and a block cannot share a name");
    a.line = it->first.Mark().line + 1;
    t.actors.push_back(std::move(a));
  }
  size_t i = 0;
  for (auto it = actors.begin(); it != actors.end(); ++it, ++i)
    read_actor(t.actors[i], it->second, "actors." + t.actors[i].name);
  if (auto f = root["finish"]) t.finish = r.names(f, "finish");
  resolve(root);
}

void Loader::read_params(const YAML::Node& n) {
  if (n) {
    r.map(n, "params");
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string k = r.name(it->first, "params");
      if (k == "event")
        r.fail(it->first, "params.event",
               "\"event\" is reserved: {{event}} is the text of the event that starts a run");
      if (it->second.IsNull()) {
        unset.insert(k);
        params[k] = "";
      } else {
        params[k] = r.str(it->second, "params." + k);
      }
    }
  }
  for (const auto& [k, v] : opts.set) {
    if (k.find('.') != std::string::npos) continue;  // a key path, applied to the tree already
    if (!params.count(k)) {
      std::vector<std::string> known;
      for (const auto& [p, pv] : params) known.push_back(p);
      throw LoadError{make_error(Errc::not_found, t.file + ": --set " + k +
                                                      ": no such parameter (params: " + join(known) +
                                                      "; a key path has dots, e.g. budget.tokens)")};
    }
    params[k] = v;
    unset.erase(k);
  }
  t.params = params;
}

void Loader::read_tools(const YAML::Node& n) {
  r.map(n, "tools");
  if (n.size() > 64) r.fail(n, "tools", "at most 64 tools");
  for (auto it = n.begin(); it != n.end(); ++it) {
    Tool tool;
    tool.name = r.name(it->first, "tools");
    const std::string path = "tools." + tool.name;
    if (t.tool(tool.name)) r.fail(it->first, path, "declared twice");
    r.keys(it->second, path,
           {"command", "setup", "description", "parameters", "timeout_s", "max_output_bytes", "max_dir_bytes",
            "env", "network", "read", "write", "node"});
    auto argv = [&](const YAML::Node& c, const std::string& where) {  // a string runs as sh -c STRING
      std::vector<std::string> v =
          c.IsScalar() ? std::vector<std::string>{"sh", "-c", text(c, where)} : r.strings(c, where, 256);
      if (c.IsScalar() && v[2].empty()) r.fail(c, where, "must not be empty");
      if (v.empty() || v[0].empty()) r.fail(c, where, "needs a program to run");
      return v;
    };
    if (tool.builtin()) {  // only its description and parameters are the file's
      r.keys(it->second, path, {"description", "parameters"});
    } else {
      tool.command =
          argv(required(it->second, path, "command", "what to run: a shell command, or a list (argv)"),
               path + ".command");
    }
    if (auto v = it->second["setup"]) tool.setup = argv(v, path + ".setup");
    if (auto v = it->second["description"]) tool.description = r.str(v, path + ".description");
    if (auto v = it->second["parameters"]) tool.parameters = read_schema(r, v, path + ".parameters");
    if (auto v = it->second["timeout_s"]) tool.timeout_s = r.number(v, path + ".timeout_s", 0.01, 86400);
    if (auto v = it->second["max_output_bytes"])
      tool.max_output_bytes = static_cast<size_t>(r.integer(v, path + ".max_output_bytes", 1, 16 << 20));
    if (auto v = it->second["max_dir_bytes"])
      tool.max_dir_bytes = r.integer(v, path + ".max_dir_bytes", int64_t{1} << 20, int64_t{64} << 30);
    read_tool_access(tool, it->second, path);
    if (auto v = it->second["node"]) tool.node = read_placement(v, path + ".node");
    t.tools.push_back(std::move(tool));
  }
}

// A tool's opt-ins: env (NAME: text), network (bool), read and write (absolute host paths).
void Loader::read_tool_access(Tool& tool, const YAML::Node& n, const std::string& path) {
  if (auto v = n["env"]) {
    r.map(v, path + ".env");
    for (auto e = v.begin(); e != v.end(); ++e) {
      const std::string k = r.str(e->first, path + ".env");
      tool.env[k] = text(e->second, path + ".env." + k);
    }
  }
  if (auto v = n["network"]) tool.network = r.boolean(v, path + ".network");
  if (auto v = n["read"]) tool.read = r.strings(v, path + ".read", 64);
  if (auto v = n["write"]) tool.write = r.strings(v, path + ".write", 64);
}

void Loader::read_block_name(const YAML::Node& key) {
  Block b;
  b.name = r.name(key, "blocks");
  if (t.block(b.name)) r.fail(key, "blocks." + b.name, "declared twice");
  t.blocks.push_back(std::move(b));
}

Block& Loader::block_named(const std::string& n) {
  for (Block& b : t.blocks)
    if (b.name == n) return b;
  throw LoadError{make_error(Errc::internal, "block " + n)};
}

void Loader::read_block(const std::string& bname, const YAML::Node& n) {
  const std::string path = "blocks." + bname;
  Block& b = block_named(bname);
  if (n.IsNull()) {  // `notes:` alone: an empty block
    b.view = {bname};
    return;
  }
  r.keys(n, path, {"text", "chat", "view", "writers"});
  if (auto v = n["text"]) b.text = text(v, path + ".text");
  if (auto v = n["chat"]) {
    b.chat = r.str(v, path + ".chat");
    if (b.chat != "system" && b.chat != "user" && b.chat != "assistant")
      r.fail(v, path + ".chat",
             "unknown chat role \"" + Reader::clip(b.chat) + "\" (roles: system, user, assistant)");
  }
  if (auto v = n["view"]) {
    b.view = block_list(v, path + ".view");
    if (b.view.empty() || b.view.back() != bname)
      r.fail(v, path + ".view",
             "the view a block's text is read under ends with the block itself (\"" + bname + "\")");
  } else {  // every block declared before it, then itself
    for (const Block& o : t.blocks) {
      b.view.push_back(o.name);
      if (o.name == bname) break;
    }
  }
  if (auto v = n["writers"]) b.writers = r.names(v, path + ".writers");
}

std::vector<std::string> Loader::block_list(const YAML::Node& n, const std::string& path) {
  std::vector<std::string> out = r.names(n, path, 1024);
  for (size_t i = 0; i < out.size(); ++i) {
    const YAML::Node at = Reader::item(n, i);
    const std::string p = Reader::item_path(n, path, i);
    check_block(at, p, out[i]);
    for (size_t j = 0; j < i; ++j)
      if (out[j] == out[i]) r.fail(at, p, "block \"" + out[i] + "\" is already in this view");
  }
  return out;
}

void Loader::check_block(const YAML::Node& at, const std::string& path, const std::string& n) {
  if (t.block(n)) return;
  std::vector<std::string> known;
  for (const Block& b : t.blocks) known.push_back(b.name);
  r.fail(at, path, "unknown block \"" + n + "\" (blocks: " + join(known) + ")", Errc::not_found);
}

void Loader::read_actor(Actor& a, const YAML::Node& n, const std::string& path) {
  r.map(n, path);
  const YAML::Node kind = n["kind"];
  if (!kind) r.fail(n, path + ".kind", "missing (thinker, writer, probe, source or sink)");
  const std::string k = r.str(kind, path + ".kind");
  const std::vector<std::string> kinds = {"thinker", "writer", "probe", "source", "sink"};
  const auto at = std::find(kinds.begin(), kinds.end(), k);
  if (at == kinds.end())
    r.fail(kind, path + ".kind",
           "unknown role kind \"" + Reader::clip(k) + "\" (kinds: " + join(kinds) + ")");
  a.kind = static_cast<Kind>(at - kinds.begin());
  if (auto v = n["node"]) a.node = read_placement(v, path + ".node");
  switch (a.kind) {
    case Kind::thinker:
    case Kind::writer: read_generator(a, n, path); break;
    case Kind::probe: read_probe(a, n, path); break;
    case Kind::source: read_source(a, n, path); break;
    case Kind::sink: read_sink(a, n, path); break;
  }
}

// `node: NAME` or `node: {label: KEY=VALUE}`.
Placement Loader::read_placement(const YAML::Node& n, const std::string& path) {
  Placement p;
  if (n.IsScalar()) {
    p.node = r.name(n, path);
    return p;
  }
  if (!n.IsMap()) r.fail(n, path, "expected a node's name or {label: KEY=VALUE}, found " + Reader::shape(n));
  r.keys(n, path, {"label"});
  const YAML::Node l = required(n, path, "label", "KEY=VALUE: any node labelled so (`chorus node --label`)");
  p.label = r.str(l, path + ".label");
  const size_t eq = p.label.find('=');
  if (eq == std::string::npos || eq == 0 || p.label.find_first_of(" \t\n") != std::string::npos)
    r.fail(l, path + ".label", "expected KEY=VALUE (no spaces), as `chorus node --label` takes it");
  return p;
}

YAML::Node Loader::required(const YAML::Node& n, const std::string& path, const std::string& key,
                            const std::string& what) {
  const YAML::Node v = n[key];
  if (!v) r.fail(n, path + "." + key, "missing: " + what);
  return v;
}

void Loader::read_view_and_writes(Actor& a, const YAML::Node& n, const std::string& path, bool writes) {
  a.view = block_list(required(n, path, "view", "the blocks it attends to, in order"), path + ".view");
  if (!writes) return;
  const YAML::Node w = required(n, path, "writes", "the block it writes");
  a.writes = r.name(w, path + ".writes");
  check_block(w, path + ".writes", a.writes);
  if (std::find(a.view.begin(), a.view.end(), a.writes) == a.view.end())
    r.fail(w, path + ".writes",
           "block \"" + a.writes + "\" must be in the actor's view (it reads what it writes)");
}

void Loader::read_triggers(Actor& a, const YAML::Node& n, const std::string& path) {
  if (auto v = n["on"]) a.on = r.names(v, path + ".on");
  if (auto v = n["after"]) a.after = r.names(v, path + ".after");
  if (n["on"] && n["after"])
    r.fail(n["after"], path + ".after", "give `on` (a run per event) or `after` (one run), not both");
}

// The node a key path names ("actors.w.on[1]"; names may hold dots: the longest key that fits
// is taken) and the path as the reader spells it (an entry of a value given as one scalar is the
// scalar: no "[0]"). Where no node fits, the deepest one that does, with the whole path.
std::pair<YAML::Node, std::string> node_at(const YAML::Node& root, const std::string& path) {
  YAML::Node n;
  n.reset(root);
  std::string canon;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '[') {
      const size_t j = path.find(']', i);
      if (j == std::string::npos) break;
      if (n.IsSequence()) {
        const YAML::Node next = n[std::stoul(path.substr(i + 1, j - i - 1))];
        n.reset(next);
        canon += path.substr(i, j - i + 1);
      }
      i = j + 1;
      continue;
    }
    if (path[i] == '.') ++i;
    std::string best;
    if (n.IsMap())
      for (auto it = n.begin(); it != n.end(); ++it) {
        const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
        const size_t end = i + k.size();
        if (!k.empty() && k.size() > best.size() && path.compare(i, k.size(), k) == 0 &&
            (end == path.size() || path[end] == '.' || path[end] == '['))
          best = k;
      }
    if (best.empty()) return {n, path};
    const YAML::Node next = n[best];
    n.reset(next);
    canon += (canon.empty() ? "" : ".") + best;
    i += best.size();
  }
  return {n, canon};
}

void Loader::resolve(const YAML::Node& root) {
  const Status s = check(t, [&](const std::string& path) {
    const auto [n, spelled] = node_at(root, path);
    return r.where(n, spelled) + ": " + spelled;
  });
  if (!s.ok()) throw LoadError{s.error()};
}

}  // namespace detail

namespace {

Result<Topology> load(const std::string& bytes, const std::string& file, const LoadOptions& opts) {
  if (bytes.size() > kMaxFileBytes)
    return make_error(Errc::out_of_range, file + ": " + std::to_string(bytes.size()) +
                                              " bytes: a topology may have at most " +
                                              std::to_string(kMaxFileBytes) + " bytes");
  if (const std::string at = first_bad_utf8(bytes); !at.empty())
    return make_error(Errc::bad_format, file + ":" + at + ": not UTF-8 text (a topology file is UTF-8)");
  std::set<std::string> overridden;
  for (const auto& [k, v] : opts.set)
    if (k.find('.') != std::string::npos) overridden.insert(k);
  Reader reader(file, overridden);
  try {
    YAML::Node root = YAML::Load(bytes);
    if (!root.IsDefined() || root.IsNull())
      return make_error(Errc::bad_format, file + ": empty: a topology needs blocks and actors");
    if (!root.IsMap())
      reader.fail(root, "(top level)",
                  "expected a mapping (name:, blocks:, actors:, ...), found " + Reader::shape(root));
    for (const auto& [k, v] : opts.set)
      if (k.find('.') != std::string::npos) apply_set(root, k, v);
    Loader l{reader, opts, {}, {}, {}};
    l.t.file = file;
    l.read(root);
    if (l.t.name.empty()) {
      std::string stem = file.substr(file.find_last_of('/') + 1);
      stem = stem.substr(0, stem.find('.'));
      l.t.name = stem.empty() ? "topology" : stem;
    }
    return std::move(l.t);
  } catch (const LoadError& e) {
    return e.error;
  } catch (const YAML::Exception& e) {
    return yaml_error(file, e);
  }
}

}  // namespace

Result<Topology> load_string(const std::string& text, const std::string& file_name, const LoadOptions& opts) {
  return load(text, file_name, opts);
}

Result<Topology> load_file(const std::string& path, const LoadOptions& opts) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::io, path + ": cannot open: " + std::strerror(errno));
  std::string bytes;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    bytes.append(buf, static_cast<size_t>(in.gcount()));
    if (bytes.size() > kMaxFileBytes) break;  // load() names the limit
  }
  return load(bytes, path, opts);
}

}  // namespace chorus::topology
