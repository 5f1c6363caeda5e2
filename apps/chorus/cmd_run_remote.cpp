// `chorus run --server URL FILE.yaml`: the topology sent to a coordinator (or `chorus serve`)
// as POST /programs/run (gateway/gateway_topology.h), which runs it on the node with the most
// room; what its stdout/stderr sinks wrote and its report come back when it ends.
//
// Several coordinators (`--cluster URL,URL,...`: a leader and its standbys): the program goes to
// whichever leads (a standby answers 503 not_leader), and a program whose coordinator dies under
// it (the connection breaks before the answer) is sent again through the next, which leads once
// the election moves (docs/cluster.md). Its roles lived in the dead coordinator, so it starts
// again from its topology; nothing of it had reached this client (the answer comes when it
// ends), and the new leader ends what the old one left on the nodes.
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

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
  std::vector<std::string> urls;
  for (size_t at = 0; at <= args.server.size();) {
    const size_t comma = std::min(args.server.find(',', at), args.server.size());
    if (comma > at) urls.push_back(args.server.substr(at, comma - at));
    at = comma + 1;
  }
  if (urls.empty()) {
    std::fprintf(stderr, "chorus run: --cluster needs a URL\n");
    return 2;
  }
  httplib::Headers headers;
  if (const char* key = std::getenv("CHORUS_API_KEY"); key && *key)
    headers.emplace("Authorization", std::string("Bearer ") + key);
  // With several coordinators, how long to look for a leader after a failure: an election
  // moves within a lease (a few seconds, docs/cluster.md).
  constexpr double kSearchS = 60;
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> failed_at;  // the first failure
  std::string server;
  std::optional<httplib::Result> got;
  for (size_t at = 0;; at = (at + 1) % urls.size()) {
    server = urls[at];
    httplib::Client client(server);
    client.set_read_timeout(24 * 3600, 0);  // the answer comes when the program ends
    client.set_connection_timeout(10, 0);
    got.emplace(client.Post("/programs/run", headers, body.dump(), "application/json"));
    const httplib::Result& res = *got;
    std::string why;
    if (!res) {
      why = httplib::to_string(res.error());
      // Connected, then lost before the answer: the program was running there.
      if (urls.size() > 1 && res.error() == httplib::Error::Read)
        std::fprintf(stderr,
                     "[coordinator %s was lost under the program (%s): it starts again through another]\n",
                     server.c_str(), why.c_str());
    } else if (res->status == 503) {
      const json e = json::parse(res->body, nullptr, false);
      if (e.is_object() && e.contains("error") && e["error"].is_object() &&
          e["error"].value("code", std::string()) == "not_leader")
        why = "not the leader";
    }
    if (why.empty() || urls.size() == 1) break;  // an answer, or nowhere else to go
    if (!failed_at) failed_at = Clock::now();
    if (std::chrono::duration<double>(Clock::now() - *failed_at).count() > kSearchS) {
      std::fprintf(stderr, "chorus run: no coordinator of %s led within %.0f s (last: %s: %s)\n",
                   args.server.c_str(), kSearchS, server.c_str(), why.c_str());
      return 1;
    }
    if (at + 1 == urls.size()) std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a round
  }
  const httplib::Result& res = *got;
  if (!res) {
    std::fprintf(stderr, "chorus run: %s: %s\n", server.c_str(), httplib::to_string(res.error()).c_str());
    return 1;
  }
  json j = json::parse(res->body, nullptr, false);
  if (res->status != 200 || !j.is_object()) {
    std::string why = res->body;
    if (j.is_object() && j.contains("error") && j["error"].contains("message")) why = j["error"]["message"];
    std::fprintf(stderr, "chorus run: %s answered %d: %s\n", server.c_str(), res->status, why.c_str());
    return 1;
  }
  for (const auto& r : j.value("restarts", json::array()))
    std::fprintf(stderr, "[node %s was lost under the program (%s): it started again on another]\n",
                 r["node"].get<std::string>().c_str(), r["error"].get<std::string>().c_str());
  if (const json re = j.value("replayed", json::object()); !j.value("restarts", json::array()).empty())
    std::fprintf(
        stderr,
        "[taken again from the coordinator's journal, not redone: %lld generations (%lld tokens), %lld "
        "tool results]\n",
        static_cast<long long>(re.value("generations", int64_t{0})),
        static_cast<long long>(re.value("tokens", int64_t{0})),
        static_cast<long long>(re.value("tool_results", int64_t{0})));
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
