// The checks every topology passes, whatever it was written in: a YAML file (the reader runs
// them after reading, its Locate giving file:line:column) or C++ (topology/builder.h).
#include <algorithm>
#include <cctype>
#include <set>

#include "topology/topology.h"

namespace chorus::topology {
namespace {

std::string listed(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

struct Failed {
  Error error;
};

class Checker {
 public:
  Checker(const Topology& t, const Locate& where) : t_(t), where_(where) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what,
                         Errc code = Errc::bad_format) const {
    throw Failed{make_error(code, where_(path) + ": " + what)};
  }

  void block_exists(const std::string& path, const std::string& name) const {
    if (t_.block(name)) return;
    std::vector<std::string> known;
    for (const Block& b : t_.blocks) known.push_back(b.name);
    fail(path, "unknown block \"" + name + "\" (blocks: " + listed(known) + ")", Errc::not_found);
  }

  void view(const std::string& path, const std::vector<std::string>& v) const {
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      block_exists(p, v[i]);
      if (std::find(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v[i]) != v.begin() + i)
        fail(p, "block \"" + v[i] + "\" is already in this view");
    }
  }

  // What the YAML reader checks field by field as it reads, for a topology built otherwise.
  void fields() const {
    if (t_.blocks.empty()) fail("blocks", "missing: a topology needs at least one block");
    std::set<std::string> names;
    for (const Block& b : t_.blocks) {
      if (!names.insert(b.name).second) fail("blocks." + b.name, "a second block of this name");
      if (!b.view.empty()) view("blocks." + b.name + ".view", b.view);
    }
    names.clear();
    for (const Tool& x : t_.tools) {
      const std::string path = "tools." + x.name;
      if (!names.insert(x.name).second) fail(path, "declared twice");
      if (x.builtin() && !x.command.empty()) fail(path + ".command", "edit_program is built in: no command");
      if (!x.builtin() && (x.command.empty() || x.command[0].empty()))
        fail(path + ".command", "needs a program to run");
      tool_access(x, path);
    }
    names.clear();
    for (const Actor& a : t_.actors) {
      const std::string path = "actors." + a.name;
      if (!names.insert(a.name).second) fail(path, "a second actor of this name");
      actor(a, path);
    }
  }

  // A tool's opt-ins: variable names, and host paths that are absolute, plain (no `.`, `..` or
  // empty parts) and not the root, /proc or /dev.
  void tool_access(const Tool& x, const std::string& path) const {
    for (const auto& [k, v] : x.env) {
      const bool ok = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0])) &&
                      std::all_of(k.begin(), k.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                      });
      if (!ok)
        fail(path + ".env." + k, "not a variable name (letters, digits and _, not starting with a digit)");
    }
    for (const auto& [key, list] : {std::pair{".read", &x.read}, std::pair{".write", &x.write}})
      for (size_t i = 0; i < list->size(); ++i) {
        const std::string& p = (*list)[i];
        const std::string at = path + key + "[" + std::to_string(i) + "]";
        if (p.empty() || p[0] != '/') fail(at, "\"" + p + "\" is not an absolute path");
        bool plain = p.size() > 1 && p.back() != '/';
        for (size_t s = 0; plain && s < p.size();) {
          const size_t e = std::min(p.find('/', s + 1), p.size());
          const std::string part = p.substr(s + 1, e - s - 1);
          plain = !part.empty() && part != "." && part != "..";
          s = e;
        }
        if (!plain)
          fail(at,
               "\"" + p + "\": give a plain absolute path (no trailing /, no . or .. parts), not the root");
        for (const char* kept : {"/proc", "/dev"})
          if (p == kept || p.rfind(std::string(kept) + "/", 0) == 0)
            fail(at, "\"" + p + "\": the sandbox makes " + kept + " its own");
      }
  }

  void actor(const Actor& a, const std::string& path) const {
    const bool generator = a.kind == Kind::thinker || a.kind == Kind::writer;
    if (a.kind != Kind::sink) {
      if (a.view.empty()) fail(path + ".view", "missing: the blocks it attends to, in order");
      view(path + ".view", a.view);
    }
    if (generator || a.kind == Kind::source) {
      if (a.writes.empty()) fail(path + ".writes", "missing: the block it writes");
      block_exists(path + ".writes", a.writes);
      if (std::find(a.view.begin(), a.view.end(), a.writes) == a.view.end())
        fail(path + ".writes",
             "block \"" + a.writes + "\" must be in the actor's view (it reads what it writes)");
    }
    if (!a.on.empty() && !a.after.empty())
      fail(path + ".after", "give `on` (a run per event) or `after` (one run), not both");
    if (generator) {
      if (a.max_tokens < 1) fail(path + ".max_tokens", "must be at least 1");
      for (const std::string& s : a.stop)
        if (s.empty()) fail(path + ".stop", "an empty stop string would stop at once");
      for (const Emit& e : a.emits)
        if (e.at.empty() || e.event.empty())
          fail(path + ".emit", "each needs `at` (text) and `event` (a name)");
      for (const std::string& tool : a.tools)
        if (!t_.tool(tool) && tool != kEditProgram)
          fail(path + ".tools", "unknown tool \"" + tool + "\"", Errc::not_found);
      if (a.kind == Kind::writer && a.on.empty() && a.after.empty())
        fail(
            path,
            "a writer needs a trigger: `on: [event, ...]` (a piece per event) or `after: [...]` (one piece)");
    }
    if (a.kind == Kind::probe) {
      if (a.question.empty()) fail(path + ".question", "must not be empty");
      if (a.candidates.empty()) fail(path + ".candidates", "needs at least one candidate");
      if (a.fire_on.empty()) fail(path + ".fire_on", "needs at least one candidate");
      for (int i : a.fire_on)
        if (i < 0 || static_cast<size_t>(i) >= a.candidates.size())
          fail(path + ".fire_on", "candidate " + std::to_string(i) + " does not exist");
      if (a.fires.empty()) fail(path + ".fires", "missing: the event it emits");
      if (!a.watch.empty()) block_exists(path + ".watch", a.watch);
      if (a.watch.empty() && a.every_ms == 0 && a.on.empty())
        fail(path,
             "a probe needs a trigger: `watch: BLOCK` (every_new_tokens), `every_ms: N` or `on: [event, "
             "...]`");
    }
    const bool file = (a.kind == Kind::source && a.from == SourceKind::file) ||
                      (a.kind == Kind::sink && a.sink == SinkKind::file);
    const bool zmq = (a.kind == Kind::source && a.from == SourceKind::zmq) ||
                     (a.kind == Kind::sink && a.sink == SinkKind::zmq);
    if (file && a.path.empty()) fail(path + ".path", "missing: the file");
    if (zmq && a.endpoint.find("://") == std::string::npos)
      fail(path + ".endpoint", "expected an endpoint such as tcp://127.0.0.1:5556");
  }

  // Across the topology: events, sinks, shared writers.
  void references() const {
    const auto emitters = t_.emitters();
    std::vector<std::string> events;
    for (const auto& [e, who] : emitters) events.push_back(e);
    auto event = [&](const std::string& path, const std::string& e) {
      if (!emitters.count(e))
        fail(path, "no actor emits event \"" + e + "\" (events: " + listed(events) + ")", Errc::not_found);
    };
    std::map<std::string, std::vector<std::string>> writers_of;  // block -> actors writing it
    for (const Actor& a : t_.actors) {
      const std::string path = "actors." + a.name;
      for (const auto& [key, list] : {std::pair{".on", &a.on}, std::pair{".after", &a.after}})
        for (size_t i = 0; i < list->size(); ++i) {
          const std::string p = path + key + "[" + std::to_string(i) + "]";
          event(p, (*list)[i]);
          const auto& who = emitters.at((*list)[i]);
          if (a.kind != Kind::sink && who.size() == 1 && who[0] == a.name)
            fail(p, "an actor cannot be triggered by its own event \"" + (*list)[i] + "\"");
        }
      for (size_t i = 0; a.kind != Kind::sink && i < a.to.size(); ++i) {
        const Actor* s = t_.actor(a.to[i]);
        if (s && s->kind == Kind::sink) continue;
        std::vector<std::string> sinks;
        for (const Actor& o : t_.actors)
          if (o.kind == Kind::sink) sinks.push_back(o.name);
        fail(path + ".to[" + std::to_string(i) + "]",
             (s ? "\"" + a.to[i] + "\" is a " + kind_name(s->kind) + ", not a sink"
                : "unknown sink \"" + a.to[i] + "\"") +
                 " (sinks: " + listed(sinks) + ")",
             s ? Errc::bad_format : Errc::not_found);
      }
      if (!a.writes.empty()) writers_of[a.writes].push_back(a.name);
    }
    for (const auto& [b, who] : writers_of) {
      if (who.size() < 2) continue;
      const Block& blk = *t_.block(b);
      for (const auto& w : who)
        if (std::find(blk.writers.begin(), blk.writers.end(), w) == blk.writers.end())
          fail("actors." + w + ".writes",
               "block \"" + b + "\" is written by " + listed(who) + ": declare them in blocks." + b +
                   ".writers to let them share it (each write then goes in whole, in arrival order)");
    }
    for (const Block& b : t_.blocks)
      for (size_t i = 0; i < b.writers.size(); ++i) {
        const Actor* a = t_.actor(b.writers[i]);
        if (a && a->writes == b.name) continue;
        fail("blocks." + b.name + ".writers[" + std::to_string(i) + "]",
             a ? "actor \"" + a->name + "\" does not write this block"
               : "unknown actor \"" + b.writers[i] + "\"",
             a ? Errc::bad_format : Errc::not_found);
      }
    for (size_t i = 0; i < t_.finish.size(); ++i) event("finish[" + std::to_string(i) + "]", t_.finish[i]);
    // A program's tools run in one sandbox: placed, they are placed together.
    const Tool* first = nullptr;
    for (const Tool& tool : t_.tools) {
      if (tool.builtin()) continue;
      if (!first) first = &tool;
      if (!(tool.node == first->node))
        fail("tools." + tool.name + ".node", "a program's tools share one sandbox: place them alike (tools." +
                                                 first->name + " runs on " + first->node.describe() +
                                                 ", this one on " + tool.node.describe() + ")");
    }
    for (const Actor& a : t_.actors) {
      if (!a.node.empty() && a.kind == Kind::sink && a.sink == SinkKind::callback)
        fail("actors." + a.name + ".node",
             "a callback sink runs in its program's process: it has no placement");
      if (!a.node.empty() && a.kind == Kind::source && a.from != SourceKind::file &&
          a.from != SourceKind::zmq)
        fail("actors." + a.name + ".node",
             "a source is placed where it reads: a file or a ZeroMQ socket (stdin, api and text have no "
             "place)");
    }
    for (const Actor& a : t_.actors)
      for (const Emit& e : a.emits)
        if (e.event.size() > 5 && e.event.compare(e.event.size() - 5, 5, ".done") == 0 &&
            e.event !=
                a.name + ".done")  // "x.done" is actor x's; from another it would end x's listeners early
          fail("actors." + a.name + ".emit", "event \"" + e.event + "\" is reserved for actor \"" +
                                                 e.event.substr(0, e.event.size() - 5) + "\"");
  }

 private:
  const Topology& t_;
  const Locate& where_;
};

}  // namespace

Status check(const Topology& t, const Locate& where) {
  try {
    Checker c(t, where);
    c.fields();
    c.references();
    return Status::success();
  } catch (const Failed& f) {
    return f.error;
  }
}

}  // namespace chorus::topology
