// Program::Impl: what a running program holds (its actors, blocks, engine, outcome), shared by
// the program's lifecycle (actors/program.cpp) and its start and patches
// (actors/program_start.cpp). Private to those two files: it brings CAF and ZeroMQ with it.
#pragma once

#include <atomic>
#include <caf/all.hpp>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "actors/program.h"
#include "actors/program_roles.h"

namespace chorus {

struct Program::Impl {
  caf::actor_system* sys = nullptr;
  topology::Topology topo;  // the program as it runs: a patch's result once patched
  ProgramHooks hooks;
  std::shared_ptr<SharedEngine> engine;  // this program's alone, or shared with others
  bool own_engine = false;               // made for it (Program::start with a model)
  uint64_t program_id = 0;               // in the engine's batcher
  caf::actor batcher, ctl;
  std::vector<caf::actor> actors;   // roles and feeders (the controller apart)
  std::vector<caf::actor> sinks;    // stopped after the others, once their mailboxes are written out
  std::vector<caf::actor> outlets;  // consoles and ZeroMQ PUB sockets: stopped last
  std::map<topology::SinkKind, caf::actor> consoles;  // one per standard stream
  std::map<std::string, caf::actor> api_sources;
  std::map<std::string, BlockId> blocks;
  std::map<std::string, caf::actor> roles;  // by name, sinks included
  caf::actor tools;                         // its sandbox's actor (tools other than edit_program)
  caf::actor patcher;                       // where edit_program calls go (when a role may make one)
  std::mutex patch_m;                       // one patch at a time; the end waits for the one under way
  std::deque<program_roles::Clock::time_point> patches;  // when the patches of the last minute came
  std::shared_ptr<program_roles::Outcome> outcome = std::make_shared<program_roles::Outcome>();
  std::unique_ptr<zmq::context_t> zmq_ctx;  // outlives the ZeroMQ actors
  bool torn_down = false;
  bool registered = false;  // with the batcher, under program_id
  // Set at teardown: a tool still running is killed instead of waited for.
  std::shared_ptr<std::atomic<bool>> tools_cancel = std::make_shared<std::atomic<bool>>(false);
  bool managed = false;  // scheduled by the engine's ProgramManager
  // Its placed actors (actors/placed_actor.h): the key their nodes host them under (random: no
  // two programs of a cluster share one), and where one that is lost for good reports it (the
  // controller, once it is made).
  static uint64_t new_host_key();  // actors/program_sinks.cpp
  uint64_t host_key = new_host_key();
  struct ControllerSlot {
    std::mutex m;
    caf::actor ctl;
  };
  std::shared_ptr<ControllerSlot> ctl_slot = std::make_shared<ControllerSlot>();
  // What a placed actor reports when it is lost for good: the program ends with the error
  // (actors/program_sinks.cpp).
  std::function<void(const std::string&)> lost(const std::string& actor) const;
  // Hosts `actor`'s stand-in on a node its placement names (actors/placed_actor.h); `host`
  // makes the hosting frame. Errors: spawn_placed_actor's, naming the program (`where`) and the
  // actor (`actors.NAME`; the tool sandbox, "sandbox": `tools`).
  Result<caf::actor> place(const std::string& where, const std::string& actor, const topology::Placement& at,
                           std::function<Frame(uint64_t id)> host);
  // Generators made under each name so far: a role a patch makes again is another incarnation,
  // recorded apart in the journal (ProgramHooks::journal).
  std::map<std::string, int> incarnations;

  bool ended() {
    std::lock_guard<std::mutex> l(outcome->m);
    return outcome->ended;
  }

  // Stops every actor, keeps what the blocks hold in the report, and ends the program on its
  // engine (its blocks freed); once, under patch_m.
  void teardown();
};

// A program's sinks (actors/program_sinks.cpp).
struct Program::Sinks {
  // Makes sink `a` of the program: its outlet (its file, its PUB socket, the callback hook, or its
  // stream's one console) and its role, added to im.roles and im.sinks. Errors name `where` (the
  // file) and the actor.
  static Status make(caf::actor_system& sys, Program::Impl& im, const std::string& where,
                     const topology::Actor& a);

 private:
  // Where a sink's text goes: its file, its PUB socket, the hook, or its stream's one console.
  static Status outlet(caf::actor_system& sys, Program::Impl& im, const std::string& where,
                       const topology::Actor& a, program_roles::SinkRoleConfig& sc);
};

}  // namespace chorus
