#include "gateway/gateway_topology.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>

#include "actors/program.h"
#include "actors/program_journal.h"
#include "gateway/openai_request.h"
#include "topology/topology.h"

namespace chorus {
namespace {

using json = nlohmann::json;

std::atomic<uint64_t> g_next_run{1};

}  // namespace

std::string run_topology_request(caf::actor_system& sys, const Model& model, GatewayBackends& backends,
                                 const std::string& body, bool unsafe_tools,
                                 std::shared_ptr<ActorPlacement> placement) {
  if (const std::string why = backends.unavailable(); !why.empty())  // a standby coordinator
    throw HttpError{503, error_body(why, "server_error", "", "not_leader")};
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("topology") || !j["topology"].is_string())
    bad_request("`topology` is required: the topology file's text", "topology");
  const std::string name = j.value("name", std::string("topology.yaml"));
  topology::LoadOptions lo;
  if (j.contains("set")) {
    if (!j["set"].is_object()) bad_request("`set` is an object of KEY: VALUE strings", "set");
    for (const auto& [k, v] : j["set"].items()) {
      if (!v.is_string()) bad_request("`set." + k + "` is not a string", "set");
      lo.set.emplace_back(k, v.get<std::string>());
    }
  }
  if (j.contains("input")) {
    if (!j["input"].is_string()) bad_request("`input` is a string", "input");
    lo.set.emplace_back("input", j["input"].get<std::string>());
  }
  auto loaded = topology::load_string(j["topology"].get<std::string>(), name, lo);
  if (!loaded)
    throw HttpError{
        400, error_body(loaded.error().message, "invalid_request_error", "topology", "invalid_topology")};
  topology::Topology t = std::move(*loaded);
  if (!placement) {  // `chorus serve`: one process
    for (const auto& a : t.actors)
      if (!a.node.empty())
        spdlog::info("gateway: topology {}: actors.{} runs here: `node:` is for a cluster", t.name, a.name);
  }
  const std::string label = "topology-" + std::to_string(g_next_run++) + "-" + t.name;
  // A program whose node is lost under it starts again on another (up to kMaxRestarts times):
  // nothing of it reached the client yet (the answer comes at its end); its roles and blocks are
  // made again from the topology, and the journal gives them back what they had finished there
  // (each generation's tokens, each tool's result), so that nothing is done twice.
  constexpr int kMaxRestarts = 3;
  json restarts = json::array();
  std::string avoid;
  auto journal = std::make_shared<ProgramJournal>();
  for (int attempt = 0;; ++attempt) {
    journal->new_run();
    const std::shared_ptr<GatewayBackend> b = backends.place(label, avoid);
    auto engine = SharedEngine::remote(model, b->programs->memory(), b->programs->capacity_pages(),
                                       b->programs->scheduler(), "node " + b->name);
    auto output = std::make_shared<std::pair<std::mutex, json>>();
    output->second = json::array();
    ProgramHooks hooks;
    hooks.unsafe_tools = unsafe_tools;
    hooks.placement = placement;
    if (b->up) hooks.journal = journal;  // a node that can be lost; one local engine records nothing
    hooks.console = [output](const std::string& stream, const std::string& text) {  // into the answer
      std::lock_guard<std::mutex> l(output->first);
      json& out = output->second;
      if (!out.empty() && out.back()["stream"] == stream)
        out.back()["text"] = out.back()["text"].get<std::string>() + text;
      else
        out.push_back({{"stream", stream}, {"text", text}});
    };
    spdlog::info("gateway: topology program `{}` placed on `{}`", label, b->name);
    auto program = Program::start(sys, t, engine, std::move(hooks));
    ProgramReport report;
    if (program) {
      report = (*program)->wait();
      program->reset();
    }
    const std::string error = program ? report.error : program.error().message;
    // It failed with its node down (the node's link says so before it fails a request): another
    // node runs it again.
    if ((!program || report.ended_by == "error") && b->up && !b->up() && attempt < kMaxRestarts) {
      b->lost = true;  // nothing more is placed there
      avoid = b->name;
      restarts.push_back({{"node", b->name}, {"error", error}});
      backends.restarted();
      spdlog::warn("gateway: topology program `{}` lost its node `{}`: it starts again elsewhere", label,
                   b->name);
      continue;
    }
    backends.forget(label);
    if (!program) throw http_error(program.error());
    const ProgramJournal::Counts replayed = journal->replayed();
    spdlog::info("gateway: topology program `{}` on `{}` ended: {}{}", label, b->name, report.ended_by,
                 report.error.empty() ? "" : " (" + report.error + ")");
    if (journal->stopped_recording())
      spdlog::warn(
          "gateway: topology program `{}` filled its journal ({} MiB): what it did after that would be "
          "done again if its node were lost",
          label, ProgramJournal::kDefaultMaxBytes >> 20);
    if (attempt > 0) {
      backends.replayed(replayed.requests, replayed.tokens, replayed.tool_results);
      spdlog::info(
          "gateway: topology program `{}` took again from its journal {} generations ({} tokens), {} "
          "tool results, {} bytes its sinks had delivered",
          label, replayed.requests, replayed.tokens, replayed.tool_results, replayed.sink_bytes);
    }
    std::lock_guard<std::mutex> l(output->first);
    return json{{"program", label},
                {"node", b->name},
                {"restarts", restarts},
                {"replayed",
                 {{"generations", replayed.requests},
                  {"tokens", replayed.tokens},
                  {"tool_results", replayed.tool_results},
                  {"sink_bytes", replayed.sink_bytes}}},
                {"ended_by", report.ended_by},
                {"error", report.error},
                {"seconds", report.seconds},
                {"generated_tokens", report.generated_tokens},
                {"events", report.events},
                {"blocks", report.block_tokens},
                {"output", output->second}}
        .dump();
  }
}

}  // namespace chorus
