// The actors at a program's edges (actors/program_roles.h): its tool actor, with the program's
// sandbox; the reader of a whole file into a source; and the sinks that write text out.
#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>

#include "actors/atoms.h"
#include "actors/program_roles.h"
#include "actors/role_messages.h"
#include "actors/sandbox.h"
#include "engine/step/trace.h"
#include "net/role_codec.h"

namespace chorus::program_roles {
namespace {

// The program's tools: one sandbox (actors/sandbox.h), made with the program (each tool's
// `setup` run in it) and removed with it — and, while the program is paused past its idle lease,
// removed (SandboxCool) and made again ahead of its restore (SandboxWarm) or at its next call. Calls
// run one at a time. A detached actor: a run blocks until the tool ends.
// A tool's run: its time and output limits, and what it opted in to reach.
SandboxLimits limits_of(const topology::Tool& t) {
  SandboxLimits lim;
  lim.timeout_s = t.timeout_s;
  lim.max_output_bytes = t.max_output_bytes;
  lim.max_dir_bytes = t.max_dir_bytes;
  for (const auto& [k, v] : t.env) lim.access.env.push_back(k + "=" + v);
  lim.access.network = t.network;
  lim.access.read = t.read;
  lim.access.write = t.write;
  return lim;
}

// A run in the sandbox, as a slice of the program's lane: the tool, how it ended, its output.
Result<ToolResult> traced_run(Sandbox& box, const TraceLane& tl, const std::string& what,
                              const std::vector<std::string>& argv, const topology::Tool& t,
                              const std::string& input = {}, const std::atomic<bool>* cancel = nullptr) {
  const int64_t t0 = tl.trace ? tl.trace->now_us() : 0;
  auto r = box.run(argv, limits_of(t), input, cancel);
  if (tl.trace) {
    const std::string args = r ? "{\"ended\":" + Trace::quote(r->describe()) +
                                     ",\"output_bytes\":" + std::to_string(r->output.size()) + "}"
                               : "{\"error\":" + Trace::quote(r.error().message) + "}";
    tl.trace->complete("tool", what, Trace::kRolesPid, tl.lane, t0, tl.trace->now_us() - t0, args);
  }
  return r;
}

void tool_main(caf::blocking_actor* self, std::string base, std::string name,
               std::vector<topology::Tool> tools, std::shared_ptr<std::atomic<bool>> cancel, TraceLane tl) {
  std::optional<Sandbox> box;
  std::string broken;  // why the sandbox could not be made (its calls say so)
  auto mark = [&](const char* what) {
    if (tl.trace) tl.trace->instant("tool", what, Trace::kRolesPid, tl.lane, tl.trace->now_us());
  };
  auto make = [&] {
    if (box) return;
    auto made = Sandbox::create(base, name);
    if (!made) {
      broken = "no sandbox: " + made.error().message;
      spdlog::error("program {}: {}", name, broken);
      return;
    }
    box.emplace(std::move(*made));
    mark("sandbox made");
    broken.clear();
    for (const auto& t : tools) {
      if (t.setup.empty()) continue;
      auto r = traced_run(*box, tl, "setup " + t.name, t.setup, t);
      if (!r || !r->ok()) {
        broken = "the setup of tool " + t.name + " failed: " +
                 (r ? r->describe() + (r->output.empty() ? "" : ": " + r->output) : r.error().message);
        spdlog::error("program {}: {}", name, broken);
        return;
      }
    }
  };
  auto call = [&](const std::string& tool, const std::string& args) -> std::string {
    const topology::Tool* t = nullptr;
    std::string known;
    for (const auto& x : tools) {
      if (x.name == tool) t = &x;
      known += (known.empty() ? "" : ", ") + x.name;
    }
    if (!t) return "error: unknown tool \"" + tool + "\" (tools: " + known + ")";
    make();  // cold: made again first
    if (!broken.empty()) return "error: " + broken;
    auto r = traced_run(*box, tl, t->name, t->command, *t, args, cancel.get());
    if (!r) return "error: " + r.error().message;
    std::string out = r->output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    if (!r->ok()) out += (out.empty() ? "" : "\n") + std::string("[") + r->describe() + "]";
    return out;
  };
  const std::string who = "sandbox of " + name;
  auto cool = [&] {  // nothing runs now (calls run one at a time): remove it all
    if (!box) return false;
    if (Status s = box->destroy(); !s.ok())
      spdlog::warn("program {}: removing its sandbox: {}", name, s.error().message);
    box.reset();
    mark("sandbox removed");
    return true;
  };
  make();
  for (bool running = true; running;)
    self->receive(
        [&](role_ask_atom, const Frame& f) -> Frame {
          auto m = read_role(who, f);
          if (!m) return encode_tool_result("error: the sandbox could not read the call");
          if (m->kind == RoleKind::tool_call) return encode_tool_result(call(m->tool, m->text));
          if (m->kind == RoleKind::sandbox_warm) {
            if (!box || !broken.empty()) {
              box.reset();
              make();
            }
            return encode_tool_result(broken);
          }
          if (m->kind == RoleKind::sandbox_cool) return encode_tool_result(cool() ? "removed" : "");
          unexpected_role(who, *m);
          return encode_tool_result(std::string("error: a sandbox does not take ") + role_kind_name(m->kind));
        },
        [&](role_atom, const Frame& f) {
          auto m = read_role(who, f);
          if (!m) return;
          if (m->kind != RoleKind::sandbox_cool) return unexpected_role(who, *m);
          cool();
        },
        [&](caf::exit_msg&) { running = false; });
}

// Reads a whole file (no following) and sends it line by line, then FeedEnded.
void read_file_lines(caf::blocking_actor* self, std::string path, caf::actor target, std::string who,
                     caf::actor ctl) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    self->send(ctl, role_atom::value,
               encode_role_failed(who, "cannot open " + path + ": " + std::strerror(errno)));
    return;
  }
  std::string line;
  while (std::getline(in, line))
    self->send(target, role_atom::value, encode_role_text(in.eof() ? line : line + "\n"));
  self->send(target, role_atom::value, encode_feed_ended());
}

// ---- sink: text somewhere, a prefix at each line start -----------------------------------------

struct SinkRoleState {
  bool at_line_start = true;
  caf::strong_actor_ptr last;  // who wrote the current line
};

caf::behavior sink_role(caf::stateful_actor<SinkRoleState>* self, SinkRoleConfig cfg) {
  auto c = std::make_shared<SinkRoleConfig>(std::move(cfg));
  auto out = [=](const std::string& s) {
    using topology::SinkKind;
    if (c->kind == SinkKind::zmq || c->console) {
      self->send(c->console ? c->console : c->zmq, role_atom::value, encode_role_text(s));
      return;
    }
    std::FILE* f = c->kind == SinkKind::stdout_stream   ? stdout
                   : c->kind == SinkKind::stderr_stream ? stderr
                                                        : c->file.get();
    std::fwrite(s.data(), 1, s.size(), f);
    std::fflush(f);
  };
  // Text with the prefix at each line start; a new producer starts on a new line. `producer`
  // names it for the journal, which skips what an earlier run of the program delivered.
  auto write = [=](const std::string& given, const caf::strong_actor_ptr& from, const std::string& producer) {
    auto& st = self->state;
    const std::string text = c->journal ? c->journal->deliver(c->name, producer, given) : given;
    if (text.empty()) return;
    if (c->callback) {
      c->callback(c->name, text);
      return;
    }
    std::string s;
    if (!st.at_line_start && from != st.last) {
      s += "\n";
      st.at_line_start = true;
    }
    for (char ch : text) {
      if (st.at_line_start && ch != '\n') s += c->prefix;
      st.at_line_start = ch == '\n';
      s += ch;
    }
    st.last = from;
    out(s);
  };
  return {
      [=](role_atom, const Frame& f) {
        auto m = read_role(c->name, f);
        if (!m) return;
        if (m->kind == RoleKind::text) return write(m->text, self->current_sender(), m->producer);
        if (m->kind != RoleKind::signal) return unexpected_role(c->name, *m);
        std::string t = m->text;
        while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
        write("[" + m->event + "] " + t + "\n", nullptr, "event " + m->event);
      },
      [=](stop_atom) { self->quit(); },  // after what was queued before it
  };
}

}  // namespace

caf::actor spawn_sink(caf::actor_system& sys, SinkRoleConfig cfg) {
  return sys.spawn(sink_role, std::move(cfg));
}
caf::actor spawn_tools(caf::actor_system& sys, std::string base, std::string name,
                       std::vector<topology::Tool> tools, std::shared_ptr<std::atomic<bool>> cancel,
                       TraceLane trace) {
  if (!cancel) cancel = std::make_shared<std::atomic<bool>>(false);
  return sys.spawn<caf::detached>(tool_main, std::move(base), std::move(name), std::move(tools),
                                  std::move(cancel), std::move(trace));
}
caf::actor spawn_file_reader(caf::actor_system& sys, std::string path, caf::actor target, std::string who,
                             caf::actor ctl) {
  return sys.spawn<caf::detached>(read_file_lines, std::move(path), std::move(target), std::move(who),
                                  std::move(ctl));
}

}  // namespace chorus::program_roles
