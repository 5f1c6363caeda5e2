// `chorus run --server URL FILE.yaml`: the topology sent to a coordinator (or `chorus serve`)
// as POST /programs/run (gateway/gateway_topology.h), which runs it on the node with the most
// room; what its stdout/stderr sinks wrote and its report come back when it ends.
#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/chorus/commands.h"

namespace chorus::app {

int run_remote(const RunArgs& args) {
  using json = nlohmann::json;
  if (args.files.size() != 1) {
    std::fprintf(stderr, "chorus run --server: one topology file at a time\n");
    return 2;
  }
  const std::string& file = args.files.front();
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr, "chorus run: cannot read %s\n", file.c_str());
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  json body = {{"topology", text.str()}, {"name", file}, {"set", json::object()}};
  for (const auto& kv : args.set) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "chorus run: --set %s: expected KEY=VALUE\n", kv.c_str());
      return 2;
    }
    body["set"][kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (args.input_given) body["input"] = args.input;
  httplib::Client client(args.server);
  client.set_read_timeout(24 * 3600, 0);  // the answer comes when the program ends
  client.set_connection_timeout(10, 0);
  httplib::Headers headers;
  if (const char* key = std::getenv("CHORUS_API_KEY"); key && *key)
    headers.emplace("Authorization", std::string("Bearer ") + key);
  auto res = client.Post("/programs/run", headers, body.dump(), "application/json");
  if (!res) {
    std::fprintf(stderr, "chorus run: %s: %s\n", args.server.c_str(),
                 httplib::to_string(res.error()).c_str());
    return 1;
  }
  json j = json::parse(res->body, nullptr, false);
  if (res->status != 200 || !j.is_object()) {
    std::string why = res->body;
    if (j.is_object() && j.contains("error") && j["error"].contains("message")) why = j["error"]["message"];
    std::fprintf(stderr, "chorus run: %s answered %d: %s\n", args.server.c_str(), res->status, why.c_str());
    return 1;
  }
  for (const auto& r : j.value("restarts", json::array()))
    std::fprintf(stderr, "[node %s was lost under the program (%s): it started again on another]\n",
                 r["node"].get<std::string>().c_str(), r["error"].get<std::string>().c_str());
  for (const auto& o : j["output"]) {
    std::FILE* to = o["stream"] == "stderr" ? stderr : stdout;
    std::fputs(o["text"].get<std::string>().c_str(), to);
    std::fflush(to);
  }
  if (!args.quiet) {
    std::string blocks, events;
    for (const auto& [b, n] : j["blocks"].items())
      blocks += (blocks.empty() ? "" : ", ") + b + " " + std::to_string(n.get<int64_t>());
    for (const auto& [e, n] : j["events"].items())
      events += (events.empty() ? "" : ", ") + e + " x" + std::to_string(n.get<int64_t>());
    std::fprintf(
        stderr,
        "\n[%s on node %s: ended by %s after %.2f s; %lld tokens generated; blocks: %s; events: %s]\n",
        j["program"].get<std::string>().c_str(), j["node"].get<std::string>().c_str(),
        j["ended_by"].get<std::string>().c_str(), j["seconds"].get<double>(),
        static_cast<long long>(j["generated_tokens"].get<int64_t>()), blocks.c_str(),
        events.empty() ? "none" : events.c_str());
  }
  if (j["ended_by"] == "error") {
    std::fprintf(stderr, "chorus run: %s\n", j["error"].get<std::string>().c_str());
    return 1;
  }
  return 0;
}

}  // namespace chorus::app
