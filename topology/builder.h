// Programs written in C++: the Topology a file would give, built in code and checked by the same
// checks (topology::check) — so a program built here and one read from YAML run the same way,
// through Program::start (actors/program.h). Each add returns the new entry, with the defaults a
// file gets, for the caller to fill in further (its fields are topology.h's):
//
//   topology::Builder b("thinker_writer");
//   b.block("prompt", "Why is the sky blue?").chat = "user";
//   b.block("thoughts");
//   auto& thinker = b.thinker("thinker", {"prompt", "thoughts"}, "thoughts");
//   thinker.prefill = "<|im_start|>assistant\n";
//   thinker.emits = {{"\n", "line"}};
//   thinker.to = {"out"};
//   b.sink("out");
//   Result<topology::Topology> t = b.build();  // "thinker_writer: actors.x.writes: ..." when wrong
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace chorus::topology {

class Builder {
 public:
  explicit Builder(std::string name);

  // The topology's own fields (description, engine, params, finish, budgets); its blocks, tools
  // and actors are the ones added below.
  Topology& topology() { return t_; }

  Block& block(std::string name, std::string text = "");
  Tool& tool(std::string name, std::vector<std::string> command);
  // A thinker (max_tokens 256) and a writer (48, stopping at "\n"; it runs once per `on` event).
  Actor& thinker(std::string name, std::vector<std::string> view, std::string writes);
  Actor& writer(std::string name, std::vector<std::string> view, std::string writes,
                std::vector<std::string> on);
  // A probe fires NAME.fired when the first candidate's probability reaches 0.5; give it a
  // trigger (watch, every_ms or on).
  Actor& probe(std::string name, std::vector<std::string> view, std::string question,
               std::vector<std::string> candidates);
  // A source writes into `writes`, under the view [writes] (set `view` to read more before it).
  Actor& source(std::string name, SourceKind from, std::string writes);
  Actor& sink(std::string name, SinkKind to = SinkKind::stdout_stream);

  // The topology, checked; errors name it and the key path ("NAME: actors.x.writes: ...").
  Result<Topology> build() const;

 private:
  Actor& add(std::string name, Kind kind);

  Topology t_;
  std::deque<Block> blocks_;  // deques: what an add returned stays valid while more are added
  std::deque<Tool> tools_;
  std::deque<Actor> actors_;
};

}  // namespace chorus::topology
