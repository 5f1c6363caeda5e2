#include "topology/builder.h"

#include <algorithm>

namespace chorus::topology {

Builder::Builder(std::string name) {
  t_.file = name;
  t_.name = std::move(name);
}

Block& Builder::block(std::string name, std::string text) {
  Block& b = blocks_.emplace_back();
  b.name = std::move(name);
  b.text = std::move(text);
  return b;
}

Tool& Builder::tool(std::string name, std::vector<std::string> command) {
  Tool& x = tools_.emplace_back();
  x.name = std::move(name);
  x.command = std::move(command);
  return x;
}

Actor& Builder::add(std::string name, Kind kind) {
  Actor& a = actors_.emplace_back();
  a.name = std::move(name);
  a.kind = kind;
  return a;
}

Actor& Builder::thinker(std::string name, std::vector<std::string> view, std::string writes) {
  Actor& a = add(std::move(name), Kind::thinker);
  a.view = std::move(view);
  a.writes = std::move(writes);
  a.max_tokens = 256;
  return a;
}

Actor& Builder::writer(std::string name, std::vector<std::string> view, std::string writes,
                       std::vector<std::string> on) {
  Actor& a = add(std::move(name), Kind::writer);
  a.view = std::move(view);
  a.writes = std::move(writes);
  a.on = std::move(on);
  a.max_tokens = 48;
  a.stop = {"\n"};
  return a;
}

Actor& Builder::probe(std::string name, std::vector<std::string> view, std::string question,
                      std::vector<std::string> candidates) {
  Actor& a = add(std::move(name), Kind::probe);
  a.view = std::move(view);
  a.question = std::move(question);
  a.candidates = std::move(candidates);
  a.fire_on = {0};
  a.fires = a.name + ".fired";
  a.every_new_tokens = 64;  // once `watch` is set
  return a;
}

Actor& Builder::source(std::string name, SourceKind from, std::string writes) {
  Actor& a = add(std::move(name), Kind::source);
  a.from = from;
  a.view = {writes};
  a.writes = std::move(writes);
  return a;
}

Actor& Builder::sink(std::string name, SinkKind to) {
  Actor& a = add(std::move(name), Kind::sink);
  a.sink = to;
  return a;
}

Result<Topology> Builder::build() const {
  Topology t = t_;
  t.blocks.assign(blocks_.begin(), blocks_.end());
  t.tools.assign(tools_.begin(), tools_.end());
  t.actors.assign(actors_.begin(), actors_.end());
  for (Actor& a : t.actors)  // as the reader does: a tool call ends a run (the result goes in)
    if (!a.tools.empty() && std::find(a.stop.begin(), a.stop.end(), "</tool_call>") == a.stop.end())
      a.stop.push_back("</tool_call>");
  const std::string name = t.name;
  if (Status s = check(t, [&](const std::string& path) { return name + ": " + path; }); !s.ok())
    return s.error();
  return t;
}

}  // namespace chorus::topology
