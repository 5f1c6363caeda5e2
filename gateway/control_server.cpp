// The control endpoint of `chorus run` (gateway/control_server.h).
#include "gateway/control_server.h"

#include "gateway/http_listen.h"

#include <nlohmann/json.hpp>
#include <thread>

#include "topology/topology.h"

namespace chorus {
namespace {

using nlohmann::json;

constexpr size_t kMaxBodyBytes = 1 << 20;  // a patch is refused past 64 KiB (topology::patch), with a reason

void reply(httplib::Response& r, int status, const json& body) {
  r.status = status;
  r.set_content(body.dump(2) + "\n", "application/json");
}

void refuse(httplib::Response& r, int status, const std::string& message) {
  reply(r, status, json{{"error", {{"message", message}}}});
}

// What a client sees of a program: its blocks, its roles and how they are wired.
json describe(const std::string& name, const std::string& state, const topology::Topology* t) {
  json j{{"name", name}, {"state", state}};
  if (!t) return j;
  j["blocks"] = json::array();
  for (const auto& b : t->blocks) j["blocks"].push_back(b.name);
  j["actors"] = json::array();
  for (const auto& a : t->actors) {
    json x{{"name", a.name}, {"kind", topology::kind_name(a.kind)}};
    if (!a.view.empty()) x["view"] = a.view;
    if (!a.writes.empty()) x["writes"] = a.writes;
    if (!a.on.empty()) x["on"] = a.on;
    if (!a.after.empty()) x["after"] = a.after;
    if (!a.tools.empty()) x["tools"] = a.tools;
    j["actors"].push_back(std::move(x));
  }
  j["finish"] = t->finish;
  return j;
}

}  // namespace

struct ControlServer::Impl {
  ProgramControl control;
  HttpListener http;
  httplib::Server& svr = http.svr;

  // The program's state, or "" when there is none of that name.
  std::string state_of(const std::string& name) const {
    for (const auto& e : control.list())
      if (e.name == name) return e.state;
    return "";
  }

  void routes() {
    svr.Get("/health", [](const httplib::Request&, httplib::Response& r) {
      reply(r, 200, {{"status", "ok"}});
    });
    svr.Get("/programs", [this](const httplib::Request&, httplib::Response& r) {
      json all = json::array();
      for (const auto& e : control.list()) {
        auto t = control.topology(e.name);
        all.push_back(describe(e.name, e.state, t ? &*t : nullptr));
      }
      reply(r, 200, all);
    });
    svr.Get(R"(/programs/([^/]+))", [this](const httplib::Request& q, httplib::Response& r) {
      const std::string name = q.matches[1];
      const std::string state = state_of(name);
      if (state.empty()) return refuse(r, 404, "no program \"" + name + "\"");
      auto t = control.topology(name);
      reply(r, 200, describe(name, state, t ? &*t : nullptr));
    });
    svr.Post(R"(/programs/([^/]+)/patch)", [this](const httplib::Request& q, httplib::Response& r) {
      const std::string name = q.matches[1];
      const std::string state = state_of(name);
      if (state.empty()) return refuse(r, 404, "no program \"" + name + "\"");
      if (state == "ended") return refuse(r, 409, "program \"" + name + "\" has ended; nothing was changed");
      auto applied = control.patch(name, q.body);
      if (applied) return reply(r, 200, {{"applied", *applied}});
      // Program::patch's limit of patches a minute reads "patch: at most N patches a minute...".
      const Error& e = applied.error();
      const bool limited = e.code == Errc::out_of_range && e.message.starts_with("patch: at most ");
      const std::string now = state_of(name);
      refuse(r, now == "ended" || now == "waiting" ? 409 : limited ? 429 : 400, e.message);
    });
    svr.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
      if (!r.body.empty()) return;  // a route's own answer
      if (r.status == 404)
        refuse(r, 404,
               "no route " + q.method + " " + q.path +
                   " (GET /health, GET /programs, GET /programs/NAME, POST /programs/NAME/patch)");
      else if (r.status == 413 && q.get_header_value("Content-Type") == "application/x-www-form-urlencoded")
        refuse(r, 413,
               "a form-encoded body may have at most 8192 bytes: send the patch as "
               "Content-Type: application/json or application/yaml");
      else if (r.status == 413)
        refuse(r, 413, "the body is larger than " + std::to_string(kMaxBodyBytes) + " bytes");
      else
        refuse(r, r.status, "HTTP " + std::to_string(r.status));
    });
  }
};

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() = default;

int ControlServer::port() const {
  return impl_->http.port;
}

Result<std::unique_ptr<ControlServer>> ControlServer::start(const std::string& host, int port,
                                                            ProgramControl control) {
  auto impl = std::make_unique<Impl>();
  impl->control = std::move(control);
  // Two threads: a patch of a paused program waits for its restore, and the list still answers.
  impl->svr.new_task_queue = [] { return new httplib::ThreadPool(2); };
  impl->svr.set_payload_max_length(kMaxBodyBytes);
  impl->routes();
  if (!impl->http.start(host, port))
    return make_error(
        Errc::io, "control: cannot bind " + host + ":" + (port == 0 ? "(any port)" : std::to_string(port)));
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

}  // namespace chorus
