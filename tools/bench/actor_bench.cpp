// What a message between a program's actors costs in a process and across nodes (issue 50's
// benchmark; docs/cluster.md, "Placing actors"). The same exchange each way: a role frame asked of
// a tool sandbox (SandboxWarm: it answers "" at once when its sandbox is made) and its ToolResult
// back.
//
//   in process:   (role_ask_atom, frame) to the sandbox actor, the answer back
//   across nodes: the frame inside a Deliver through a node link (cluster/node_link.h) to a node
//                 port that hosts the sandbox (actors/actor_host.h), the answer back the same way
//
// For each: N round trips one at a time (p50, p99 of each's time) and N sent at once then every
// answer awaited (events per second, pipelined; across nodes in windows of 256, within ZeroMQ's
// queues).
//
//   chorus_actor_bench [N]                                  in process only
//   chorus_actor_bench N ENDPOINT [NODE_PUB CLIENT_KEY]     and against the node port at ENDPOINT
//       (a `chorus node --no-model`; with CURVE: its public key, z85, and this side's key file)
#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "actors/atoms.h"
#include "actors/program_roles.h"
#include "actors/sandbox.h"
#include "cluster/node_link.h"
#include "net/codec.h"
#include "net/hosting_codec.h"
#include "net/role_codec.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "actor_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Figures {
  double p50_us = 0, p99_us = 0, per_s = 0;
};

// `ask(frame) -> answer frame` timed N times one at a time, then N at once.
template <class Ask, class Many>
Figures measure(int n, const Ask& ask, const Many& many) {
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    ask();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  Figures f;
  f.p50_us = us[us.size() / 2];
  f.p99_us = us[std::min(us.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(us.size())))];
  const auto t0 = Clock::now();
  many(n);
  f.per_s = n / std::chrono::duration<double>(Clock::now() - t0).count();
  return f;
}

void print(const char* what, int n, const Figures& f) {
  std::printf("| %s | %d | %.1f | %.1f | %.0f |\n", what, n, f.p50_us, f.p99_us, f.per_s);
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (n < 10) die("N is at least 10");
  setenv("CHORUS_SANDBOX", "plain", 0);  // the sandbox is made once; its isolation is not what is timed
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  const Frame warm = encode_sandbox_warm();
  std::printf("| exchange | round trips | p50 us | p99 us | pipelined per s |\n|---|---|---|---|---|\n");

  // In process.
  caf::actor box = program_roles::spawn_tools(sys, "/tmp", "actor-bench", {});
  auto local_ask = [&] {
    self->request(box, caf::infinite, role_ask_atom::value, warm)
        .receive([](const Frame&) {}, [](caf::error& e) { die(to_string(e)); });
  };
  auto local_many = [&](int k) {
    for (int i = 0; i < k; ++i) self->send(box, role_ask_atom::value, warm);
    for (int i = 0; i < k; ++i) self->receive([](const Frame&) {});
  };
  print("in process: a role frame asked of an actor", n, measure(n, local_ask, local_many));
  self->send_exit(box, caf::exit_reason::user_shutdown);

  if (argc < 3) return 0;
  // Across nodes: a node link to the port, the sandbox hosted there.
  zmq::context_t ctx(1);
  cluster::NodeLinkOptions lo;
  lo.name = "bench";
  lo.endpoint = argv[2];
  lo.heartbeat_s = 0.5;
  lo.dead_after_s = 5;
  if (argc > 4) {
    lo.server_key = argv[3];
    auto keys = read_curve_secret(argv[4]);
    if (!keys) die(keys.error().message);
    lo.curve = *keys;
  }
  auto health = std::make_shared<cluster::NodeHealth>();
  auto link = cluster::spawn_node_link(sys, ctx, lo, health);
  if (!link) die(link.error().message);
  for (int i = 0; i < 100 && !health->up.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!health->up.load()) die(std::string("the node at ") + argv[2] + " does not answer");
  const uint64_t program = 77;
  auto call = [&](Frame f) {
    Frame out;
    self->request(*link, caf::infinite, frame_atom::value, std::move(f))
        .receive([&](const Frame& r) { out = r; }, [](caf::error& e) { die(to_string(e)); });
    return out;
  };
  auto hosted = decode_hosting(call(encode_host_sandbox(0, program, "bench", "sandbox", {})));
  if (!hosted || hosted->kind != HostingMessage::Kind::hosted) die("the node did not host the sandbox");
  const Frame deliver = encode_deliver(0, program, "sandbox", warm);
  auto remote_ask = [&] { (void)call(deliver); };
  auto remote_many = [&](int k) {  // in windows of 256: within ZeroMQ's queues (1000 by default)
    for (int done = 0; done < k;) {
      const int w = std::min(256, k - done);
      for (int i = 0; i < w; ++i) self->send(*link, frame_atom::value, deliver);
      for (int i = 0; i < w; ++i) self->receive([](const Frame&) {});
      done += w;
    }
  };
  print((std::string("across nodes: the same, inside a Deliver to ") + argv[2]).c_str(), n,
        measure(n, remote_ask, remote_many));
  (void)call(encode_unhost(0, program));
  self->send(*link, stop_atom::value);
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  return chorus::run(argc, argv);
}
