// The gateway's access log (gateway/access_log.h).
#include "gateway/access_log.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace chorus {
namespace {

std::string seconds_since(AccessRecord::Clock::time_point from, AccessRecord::Clock::time_point to) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3f s", std::chrono::duration<double>(to - from).count());
  return s;
}

}  // namespace

std::string access_line(const AccessRecord& r) {
  std::string out = "gateway: " + r.method + " " + r.path;
  if (!r.error.empty()) return out + ": " + std::to_string(r.status) + " " + r.error;
  out += " " + r.reply_id;
  if (!r.program.empty()) out += " program " + r.program;
  if (!r.backend.empty()) out += " on " + r.backend;
  out += ": " + std::to_string(r.status) + ", " + std::to_string(r.prompt_tokens) + " prompt tokens (" +
         std::to_string(r.cached_tokens) + " reused), " + std::to_string(r.completion_tokens) +
         " completion (" + r.finish + ")" + (r.streamed ? ", streamed" : "") + "; admitted after " +
         seconds_since(r.arrived, r.admitted);
  if (r.first_token != AccessRecord::Clock::time_point{})
    out += ", first token " + seconds_since(r.arrived, r.first_token);
  return out + ", done " + seconds_since(r.arrived, r.done);
}

void log_access(const AccessRecord& r) {
  if (r.status >= 500)
    spdlog::warn("{}", access_line(r));
  else
    spdlog::info("{}", access_line(r));
}

void log_refused(const std::string& method, const std::string& path, int status, const std::string& body) {
  using nlohmann::json;
  AccessRecord rec;
  rec.method = method;
  rec.path = path;
  rec.status = status;
  const json j = json::parse(body, nullptr, false);
  const json e = j.is_object() && j.contains("error") && j["error"].is_object() ? j["error"] : json::object();
  const std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "";
  const std::string message =
      e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : body;
  rec.error = (code.empty() ? "" : "(" + code + "): ") + message;
  log_access(rec);
}

}  // namespace chorus
