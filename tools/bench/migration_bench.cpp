// What a migration costs, on the path the coordinator takes (docs/cluster.md): two nodes — each
// an engine behind its memory actor and a ZeroMQ node port on loopback, one compute thread each —
// and a node link to each, as a coordinator has. For conversations of N tokens on node a:
//
//   kv:        ExportBlock parts from a, LoadBlock parts into a paused program's block on b, and
//              b's restore of that program (the pages copied in) — the KV-transfer move;
//   recompute: the N tokens prefilled into a new block on b — the recompute move.
//
// Prints one line per N with both times, per 1k tokens, and the link's MB/s: the constants of
// the coordinator's cost model (--transfer-mbps, --recompute-tps).
//
//   chorus_migration_bench MODEL [N ...]      (default N: 512 1024 2048 4096)
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "actors/atoms.h"
#include "actors/batcher.h"
#include "actors/node_port.h"
#include "actors/submit.h"
#include "cluster/node_link.h"
#include "device/cpu_device.h"
#include "net/block_transfer.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "migration_bench: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().message);
  return std::move(*r);
}

struct Node {
  std::unique_ptr<CpuDevice> device;
  caf::actor memory, port, link;
};

int run(int argc, char** argv) {
  if (argc < 2) die("usage: chorus_migration_bench MODEL [N ...]");
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {512, 1024, 2048, 4096};
  auto model = must(Model::load(argv[1]), "loading the model");
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  zmq::context_t zctx{1};
  Node nodes[2];
  for (int i = 0; i < 2; ++i) {
    Node& n = nodes[i];
    CpuDeviceOptions one_thread;
    one_thread.n_threads = 1;
    n.device = must(CpuDevice::create(one_thread), "the CPU device");
    auto engine =
        must(Engine::create(*model, *n.device, {.n_pages = 1024, .token_budget = 256}), "the engine");
    n.memory = spawn_batcher(sys, std::move(engine));
    NodePortOptions po;
    po.endpoint = "tcp://127.0.0.1:*";
    po.events_endpoint = "";
    auto bound = must(spawn_node_port(sys, n.memory, zctx, po, &n.port), "the node port");
    cluster::NodeLinkOptions lo;
    lo.name = i == 0 ? "a" : "b";
    lo.endpoint = bound.requests;
    n.link = must(spawn_node_link(sys, zctx, lo, std::make_shared<cluster::NodeHealth>()), "the node link");
  }
  caf::scoped_actor self{sys};
  auto on = [&](int i) {
    return FrameCall(
        [&, i](const Frame& f) { return ask(self, nodes[i].link, f, std::chrono::seconds(600)); });
  };
  auto finished = [&] {
    for (bool done = false; !done;)
      self->receive([&](event_atom, const std::vector<uint8_t>& f) {
        auto r = decode_reply(f);
        done = r && r->kind == ReplyKind::finished;
      });
  };
  auto prefill = [&](int i, const std::vector<TokenId>& toks) {
    const auto b = static_cast<BlockId>(must(on(i)(encode_create_block(0, "conversation")), "a block").id);
    must(on(i)(encode_request(0, Request::forward(b, toks, {b}))), "a prefill");
    finished();
    return b;
  };
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> tok(100, model->config.n_vocab - 100);
  std::printf("%7s %8s %9s %9s %9s %9s %9s %8s %9s %7s\n", "tokens", "KV MB", "export s", "load s",
              "restore s", "kv s/1k", "recomp", "kv MB/s", "recomp", "ratio");
  std::printf("%7s %8s %9s %9s %9s %9s %9s %8s %9s %7s\n", "", "", "", "", "", "", "s/1k", "", "tok/s", "");
  uint64_t program = 1;
  for (int n : sizes) {
    std::vector<TokenId> toks(static_cast<size_t>(n));
    for (auto& t : toks) t = tok(rng);
    const BlockId warm = prefill(1, toks);  // warm: b's pages and code paths
    must(on(1)(encode_free_block(0, warm)), "free");
    const BlockId from = prefill(0, toks);
    // kv: the image across, then the program's restore on b.
    const auto to = static_cast<BlockId>(must(on(1)(encode_create_block(0, "moved")), "a block").id);
    ProgramCmd reg = ProgramCmd::of(ProgramCmd::Op::register_program, program);
    reg.blocks = {to};
    reg.hold = true;
    must(on(1)(encode_program(0, reg)), "register");
    must(on(1)(encode_program(0, ProgramCmd::of(ProgramCmd::Op::pause, program))), "pause");
    auto t0 = Clock::now();
    const BlockImage image = must(fetch_block(on(0), from), "exporting");
    const double export_s = since(t0);
    if (Status s = send_block(on(1), to, image); !s.ok()) die("loading: " + s.error().message);
    const double load_s = since(t0) - export_s;
    must(on(1)(encode_program(0, ProgramCmd::of(ProgramCmd::Op::restore, program))), "restore");
    const double restore_s = since(t0) - export_s - load_s;
    const double kv_s = since(t0);
    ++program;
    // recompute: the same tokens prefilled on b.
    t0 = Clock::now();
    const BlockId again = prefill(1, toks);
    const double again_s = since(t0);
    must(on(0)(encode_free_block(0, from)), "free");
    must(on(1)(encode_free_block(0, again)), "free");
    must(on(1)(encode_program(0, ProgramCmd::of(ProgramCmd::Op::terminate, program - 1))), "terminate");
    const double mb = static_cast<double>(image.kv.size()) / 1e6;
    std::printf("%7d %8.1f %9.3f %9.3f %9.3f %9.3f %9.3f %8.0f %9.0f %6.1fx\n", n, mb, export_s, load_s,
                restore_s, kv_s * 1000 / n, again_s * 1000 / n, mb / kv_s, n / again_s, again_s / kv_s);
    std::fflush(stdout);
  }
  for (Node& n : nodes) {
    caf::anon_send(n.link, stop_atom::value);
    caf::anon_send_exit(n.port, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(n.memory, caf::exit_reason::user_shutdown);
  }
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  return chorus::run(argc, argv);
}
