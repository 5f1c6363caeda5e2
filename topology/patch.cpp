// Patches: a running program's blocks and actors changed (topology.h patch()). The patch is read
// by the file's own reader over the program as it is, then the whole program is checked again.
#include <yaml-cpp/yaml.h>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "topology/topology_loader.h"

namespace chorus::topology {
namespace detail {
namespace {

// ---- a role's settings as the YAML a file would give (to merge a patch into) -------------------

YAML::Node str_node(const std::string& s) {
  YAML::Node n(s);
  n.SetTag("!");  // a string, whatever it spells (a schema's "true" stays a string)
  return n;
}

YAML::Node num_node(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);  // exact for a float
  return YAML::Node(std::string(buf));
}

YAML::Node list_node(const std::vector<std::string>& v) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (const auto& s : v) n.push_back(str_node(s));
  return n;
}

YAML::Node json_node(const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    YAML::Node n(YAML::NodeType::Map);
    for (const auto& [k, v] : j.items()) n[k] = json_node(v);
    return n;
  }
  if (j.is_array()) {
    YAML::Node n(YAML::NodeType::Sequence);
    for (const auto& v : j) n.push_back(json_node(v));
    return n;
  }
  if (j.is_string()) return str_node(j.get<std::string>());
  if (j.is_null()) return YAML::Node(std::string("null"));
  return YAML::Node(j.dump());  // numbers and booleans, as JSON spells them
}

YAML::Node sampling_node(const SamplingParams& s) {
  YAML::Node n(YAML::NodeType::Map);
  n["temperature"] = num_node(s.temperature);
  n["top_k"] = num_node(s.top_k);
  n["top_p"] = num_node(s.top_p);
  n["min_p"] = num_node(s.min_p);
  n["repeat_penalty"] = num_node(s.repeat_penalty);
  n["repeat_last_n"] = num_node(s.repeat_last_n);
  n["seed"] = YAML::Node(std::to_string(s.seed));
  return n;
}

// `node: NAME` or `node: {label: KEY=VALUE}`.
YAML::Node placement_node(const Placement& p) {
  if (!p.node.empty()) return str_node(p.node);
  YAML::Node n(YAML::NodeType::Map);
  n["label"] = str_node(p.label);
  return n;
}

// A thinker, writer or probe as the file's keys (read back by Loader::read_actor, the same role).
YAML::Node actor_node(const Actor& a) {
  YAML::Node n(YAML::NodeType::Map);
  n["kind"] = str_node(kind_name(a.kind));
  n["view"] = list_node(a.view);
  if (!a.on.empty()) n["on"] = list_node(a.on);
  if (!a.after.empty()) n["after"] = list_node(a.after);
  if (a.kind == Kind::probe) {
    n["question"] = str_node(a.question);
    n["candidates"] = list_node(a.candidates);
    std::vector<std::string> fire_on;
    for (int i : a.fire_on) fire_on.push_back(a.candidates[static_cast<size_t>(i)]);
    n["fire_on"] = list_node(fire_on);
    n["threshold"] = num_node(a.threshold);
    n["fires"] = str_node(a.fires);
    n["edge"] = YAML::Node(std::string(a.edge ? "true" : "false"));
    if (!a.watch.empty()) {
      n["watch"] = str_node(a.watch);
      n["every_new_tokens"] = YAML::Node(std::to_string(a.every_new_tokens));
    }
    if (a.every_ms > 0) n["every_ms"] = YAML::Node(std::to_string(a.every_ms));
    if (!a.node.empty()) n["node"] = placement_node(a.node);
    return n;
  }
  n["writes"] = str_node(a.writes);
  if (!a.prefill.empty()) n["prefill"] = str_node(a.prefill);
  n["max_tokens"] = YAML::Node(std::to_string(a.max_tokens));
  std::vector<std::string> stop = a.stop;  // without the `</tool_call>` that tools add
  if (!a.tools.empty() && !stop.empty() && stop.back() == "</tool_call>") stop.pop_back();
  n["stop"] = list_node(stop);
  n["sampling"] = sampling_node(a.sampling);
  if (!a.schema.empty()) n["schema"] = json_node(nlohmann::ordered_json::parse(a.schema));
  if (!a.grammar.empty()) n["grammar"] = str_node(a.grammar);
  if (!a.emits.empty()) {
    YAML::Node emits(YAML::NodeType::Sequence);
    for (const Emit& e : a.emits) {
      YAML::Node one(YAML::NodeType::Map);
      one["at"] = str_node(e.at);
      one["event"] = str_node(e.event);
      emits.push_back(one);
    }
    n["emit"] = emits;
  }
  if (!a.to.empty()) n["to"] = list_node(a.to);
  if (!a.tools.empty()) {
    n["tools"] = list_node(a.tools);
    n["max_tool_calls"] = YAML::Node(std::to_string(a.max_tool_calls));
  }
  if (a.fresh) n["fresh"] = YAML::Node(std::string("true"));
  if (!a.node.empty()) n["node"] = placement_node(a.node);
  return n;
}

// RFC 7386: the patch's keys into `target`; a null removes a key, a mapping merges, else replaces.
YAML::Node merged(const YAML::Node& target, const YAML::Node& patch) {
  if (!patch.IsMap()) return patch;
  // Not YAML::Clone: it would give what the program had a mark (1:1), and so {{params}} again.
  YAML::Node out(YAML::NodeType::Map);
  if (target.IsMap())
    for (auto it = target.begin(); it != target.end(); ++it) out[it->first.Scalar()] = it->second;
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
    if (it->second.IsNull())
      out.remove(k);
    else
      out[k] = merged(out[k], it->second);
  }
  return out;
}

struct PatchReader {
  Loader& l;
  const Topology& before;
  const PatchOptions& opts;
  Patched out;

  void blocks(const YAML::Node& n) {
    l.r.map(n, "blocks");
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string name = l.r.name(it->first, "blocks");
      if (l.t.block(name))
        l.r.fail(it->first, "blocks." + name,
                 "already in the program: a patch adds blocks (a block's text is its history)");
      if (l.t.actor(name)) l.r.fail(it->first, "blocks." + name, "an actor and a block cannot share a name");
      l.read_block_name(it->first);
      l.read_block(name, it->second);
      out.blocks.push_back(name);
    }
  }

  void actors(const YAML::Node& n) {
    l.r.map(n, "actors");
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string name = l.r.name(it->first, "actors");
      const std::string path = "actors." + name;
      const YAML::Node v = it->second;  // a copy: `it->` is a temporary
      auto at =
          std::find_if(l.t.actors.begin(), l.t.actors.end(), [&](const Actor& a) { return a.name == name; });
      if (at == l.t.actors.end()) {
        if (v.IsNull()) l.r.fail(it->first, path, "no such actor to remove", Errc::not_found);
        if (l.t.block(name)) l.r.fail(it->first, path, "an actor and a block cannot share a name");
        Actor a;
        a.name = name;
        l.read_actor(a, v, path);
        if (a.kind == Kind::source)
          l.r.fail(v["kind"], path + ".kind", "sources are wired at start: a patch cannot add one");
        l.t.actors.push_back(std::move(a));
        out.added.push_back(name);
        continue;
      }
      if (at->kind == Kind::source || at->kind == Kind::sink)
        l.r.fail(it->first, path,
                 std::string("a ") + kind_name(at->kind) +
                     " is wired at start: a patch can add sinks, not change or remove them");
      if (name == opts.caller)
        l.r.fail(it->first, path,
                 "a role cannot change or remove itself (it called " + std::string(kEditProgram) + ")");
      if (v.IsNull()) {
        l.t.actors.erase(at);
        out.removed.push_back(name);
        continue;
      }
      l.r.map(v, path);
      Actor a;
      a.name = name;
      a.line = at->line;
      l.read_actor(a, v["kind"] ? v : merged(actor_node(*at), v), path);
      if (a.kind == Kind::source || a.kind == Kind::sink)
        l.r.fail(v["kind"], path + ".kind", "a role cannot become a source or a sink");
      *at = std::move(a);
      out.changed.push_back(name);
    }
  }

  void limits(const YAML::Node& root) const {
    const size_t actors = std::max(opts.max_actors, before.actors.size());
    const size_t blocks = std::max(opts.max_blocks, before.blocks.size());
    if (l.t.actors.size() > actors)
      l.r.fail(root["actors"], "actors",
               "the program would have " + std::to_string(l.t.actors.size()) +
                   " actors: a patch may not take it past " + std::to_string(actors),
               Errc::out_of_range);
    if (l.t.blocks.size() > blocks)
      l.r.fail(root["blocks"], "blocks",
               "the program would have " + std::to_string(l.t.blocks.size()) +
                   " blocks: a patch may not take it past " + std::to_string(blocks),
               Errc::out_of_range);
  }
};

// Where a key path of the patched program is: in the patch (its line and column) when the patch
// wrote that block or actor, else the label alone.
std::string where_in(const Reader& r, const YAML::Node& root, const std::string& path) {
  const size_t dot = path.find('.');
  const std::string section = path.substr(0, dot);
  bool written = false;
  if (dot != std::string::npos && root[section] && root[section].IsMap())
    for (auto it = root[section].begin(); it != root[section].end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
      const size_t end = dot + 1 + k.size();
      written = written || (!k.empty() && path.compare(dot + 1, k.size(), k) == 0 &&
                            (end == path.size() || path[end] == '.' || path[end] == '['));
    }
  if (!written && !(section == path && root[section])) return r.where(YAML::Node(), path) + ": " + path;
  const auto [n, spelled] = node_at(root, path);
  return r.where(n, spelled) + ": " + spelled;
}

}  // namespace
}  // namespace detail

std::string Patched::summary() const {
  std::string s;
  auto add = [&](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    s += (s.empty() ? "" : "; ") + std::string(what) + " " + detail::join(names);
  };
  add(blocks.size() == 1 ? "added block" : "added blocks", blocks);
  add("added", added);
  add("changed", changed);
  add("removed", removed);
  if (finish_changed) s += (s.empty() ? "" : "; ") + std::string("finish: ") + detail::join(topology.finish);
  return s.empty() ? "nothing changed" : s;
}

Result<Patched> patch(const Topology& current, const std::string& text, const std::string& label,
                      const PatchOptions& opts) {
  using namespace detail;
  if (text.size() > kMaxPatchBytes)
    return make_error(Errc::out_of_range, label + ": " + std::to_string(text.size()) +
                                              " bytes: a patch may have at most " +
                                              std::to_string(kMaxPatchBytes));
  if (const std::string at = first_bad_utf8(text); !at.empty())
    return make_error(Errc::bad_format, label + ":" + at + ": not UTF-8 text");
  Reader reader(label, {});
  LoadOptions lo;
  Loader l{reader, lo, current, current.params, {}, true};
  PatchReader p{l, current, opts, {}};
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap())
      reader.fail(root, "(top level)",
                  "a patch is a mapping of blocks:, actors: and finish:, found " + Reader::shape(root));
    reader.keys(root, "(top level)", {"blocks", "actors", "finish"});
    if (auto n = root["blocks"]) p.blocks(n);
    if (auto n = root["actors"]) p.actors(n);
    if (auto n = root["finish"]) {
      l.t.finish = reader.names(n, "finish");
      p.out.finish_changed = true;
    }
    p.limits(root);
    if (Status s = check(l.t, [&](const std::string& path) { return where_in(reader, root, path); }); !s.ok())
      return s.error();
    p.out.topology = std::move(l.t);
    return std::move(p.out);
  } catch (const LoadError& e) {
    return e.error;
  } catch (const YAML::Exception& e) {
    return yaml_error(label, e);
  }
}

}  // namespace chorus::topology
