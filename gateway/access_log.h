// One log line per completion request, at info (serve and coordinator log at info unless
// --log-level says otherwise): what came in, on which program and node, what it cost, how long
// each part took. A refused request gets its line too, with its status and why.
//
//   gateway: POST /v1/chat/completions chatcmpl-3-51234 program p1 on node-a: 200, 18 prompt
//   tokens (12 reused), 24 completion (length), streamed; admitted after 0.002 s, first token
//   0.031 s, done 0.412 s
//   gateway: POST /v1/chat/completions: 404 (program_not_found): no program `p9`
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace chorus {

struct AccessRecord {
  using Clock = std::chrono::steady_clock;
  std::string method, path;
  std::string reply_id;  // chatcmpl-... / cmpl-...
  std::string program;   // "" : a one-shot request
  std::string backend;   // the node it ran on ("" : the one backend)
  int status = 200;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  std::string finish;  // finish reasons of the choices, "stop" or "stop,length"
  bool streamed = false;
  Clock::time_point arrived, admitted, first_token, done;  // first_token: none when never set
  std::string error;                                       // a refused request: its code and message
};

// The line (without the logger's prefix), and the line logged: at info, at warn for a 5xx.
std::string access_line(const AccessRecord& r);
void log_access(const AccessRecord& r);
// A refused request's line: its status and the code and message of the OpenAI-style error `body`.
void log_refused(const std::string& method, const std::string& path, int status, const std::string& body);

}  // namespace chorus
