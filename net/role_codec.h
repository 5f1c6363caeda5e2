// The messages between a program's actors (schemas/roles.fbs) as frames, and their checked
// decoding. Every role message is one of these frames, in a process as across nodes: a receiver
// decodes it with decode_role(), which verifies it (net/wire.h decode_envelope) before anything
// reads it, and drops nothing silently: a frame that is not a role message is an error value.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

using Frame = std::vector<uint8_t>;

enum class RoleKind {
  signal,        // event, text
  text,          // text, producer
  feed_ended,    //
  tokens,        // count
  failed,        // actor, text (what)
  start,         // names (carried)
  upstream,      // names (emitters)
  retire,        //
  retired,       // names (queued)
  tool_call,     // tool, text (arguments), actor (caller)
  edit_program,  // actor (caller), text (patch)
  tool_result,   // text
  sandbox_cool,  //
  sandbox_warm,  //
};
const char* role_kind_name(RoleKind k);

// A decoded role message: the fields its kind uses (above), the others empty.
struct RoleMessage {
  RoleKind kind = RoleKind::signal;
  std::string event;
  std::string text;
  std::string producer;
  std::string actor;
  std::string tool;
  int64_t count = 0;
  std::vector<std::string> names;
};

Frame encode_signal(const std::string& event, const std::string& text);
Frame encode_role_text(const std::string& text, const std::string& producer = {});
Frame encode_feed_ended();
Frame encode_tokens_made(int64_t count);
Frame encode_role_failed(const std::string& actor, const std::string& what);
Frame encode_start_role(const std::vector<std::string>& carried = {});
Frame encode_upstream(const std::vector<std::string>& emitters);
Frame encode_retire_role();
Frame encode_retired(const std::vector<std::string>& queued);
Frame encode_tool_call(const std::string& tool, const std::string& arguments, const std::string& caller);
Frame encode_edit_program(const std::string& caller, const std::string& patch);
Frame encode_tool_result(const std::string& text);
Frame encode_sandbox_cool();
Frame encode_sandbox_warm();

// Verifies `frame` and reads it. Errors: what decode_envelope() refuses, and a verified frame
// that carries another protocol's message (Errc::bad_format, naming its payload).
Result<RoleMessage> decode_role(std::span<const uint8_t> frame);

}  // namespace chorus
