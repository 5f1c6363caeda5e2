#include "net/role_codec.h"

#include "net/envelope_finish.h"
#include "net/fb_read.h"
#include "net/wire.h"

namespace chorus {
namespace {

using Offset = flatbuffers::Offset<flatbuffers::String>;
using Names = flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>>;

Names names(flatbuffers::FlatBufferBuilder& fbb, const std::vector<std::string>& v) {
  return fbb.CreateVectorOfStrings(v);
}

}  // namespace

const char* role_kind_name(RoleKind k) {
  switch (k) {
    case RoleKind::signal: return "Signal";
    case RoleKind::text: return "RoleText";
    case RoleKind::feed_ended: return "FeedEnded";
    case RoleKind::tokens: return "TokensMade";
    case RoleKind::failed: return "RoleFailed";
    case RoleKind::start: return "StartRole";
    case RoleKind::upstream: return "Upstream";
    case RoleKind::retire: return "RetireRole";
    case RoleKind::retired: return "Retired";
    case RoleKind::tool_call: return "ToolCall";
    case RoleKind::edit_program: return "EditProgram";
    case RoleKind::tool_result: return "ToolResult";
    case RoleKind::sandbox_cool: return "SandboxCool";
    case RoleKind::sandbox_warm: return "SandboxWarm";
  }
  return "?";
}

Frame encode_signal(const std::string& event, const std::string& text) {
  flatbuffers::FlatBufferBuilder fbb(64 + event.size() + text.size());
  const Offset e = fbb.CreateString(event), t = fbb.CreateString(text);
  return finish_envelope(fbb, 0, wire::Payload::Signal, wire::CreateSignal(fbb, e, t).Union());
}

Frame encode_role_text(const std::string& text, const std::string& producer) {
  flatbuffers::FlatBufferBuilder fbb(64 + text.size() + producer.size());
  const Offset t = fbb.CreateString(text), p = fbb.CreateString(producer);
  return finish_envelope(fbb, 0, wire::Payload::RoleText, wire::CreateRoleText(fbb, t, p).Union());
}

Frame encode_feed_ended() {
  flatbuffers::FlatBufferBuilder fbb(48);
  return finish_envelope(fbb, 0, wire::Payload::FeedEnded, wire::CreateFeedEnded(fbb).Union());
}

Frame encode_tokens_made(int64_t count) {
  flatbuffers::FlatBufferBuilder fbb(48);
  return finish_envelope(fbb, 0, wire::Payload::TokensMade, wire::CreateTokensMade(fbb, count).Union());
}

Frame encode_role_failed(const std::string& actor, const std::string& what) {
  flatbuffers::FlatBufferBuilder fbb(64 + actor.size() + what.size());
  const Offset a = fbb.CreateString(actor), w = fbb.CreateString(what);
  return finish_envelope(fbb, 0, wire::Payload::RoleFailed, wire::CreateRoleFailed(fbb, a, w).Union());
}

Frame encode_start_role(const std::vector<std::string>& carried) {
  flatbuffers::FlatBufferBuilder fbb(64);
  const Names c = names(fbb, carried);
  return finish_envelope(fbb, 0, wire::Payload::StartRole, wire::CreateStartRole(fbb, c).Union());
}

Frame encode_upstream(const std::vector<std::string>& emitters) {
  flatbuffers::FlatBufferBuilder fbb(64);
  const Names e = names(fbb, emitters);
  return finish_envelope(fbb, 0, wire::Payload::Upstream, wire::CreateUpstream(fbb, e).Union());
}

Frame encode_retire_role() {
  flatbuffers::FlatBufferBuilder fbb(48);
  return finish_envelope(fbb, 0, wire::Payload::RetireRole, wire::CreateRetireRole(fbb).Union());
}

Frame encode_retired(const std::vector<std::string>& queued) {
  flatbuffers::FlatBufferBuilder fbb(64);
  const Names q = names(fbb, queued);
  return finish_envelope(fbb, 0, wire::Payload::Retired, wire::CreateRetired(fbb, q).Union());
}

Frame encode_tool_call(const std::string& tool, const std::string& arguments, const std::string& caller) {
  flatbuffers::FlatBufferBuilder fbb(64 + tool.size() + arguments.size() + caller.size());
  const Offset t = fbb.CreateString(tool), a = fbb.CreateString(arguments), c = fbb.CreateString(caller);
  return finish_envelope(fbb, 0, wire::Payload::ToolCall, wire::CreateToolCall(fbb, t, a, c).Union());
}

Frame encode_edit_program(const std::string& caller, const std::string& patch) {
  flatbuffers::FlatBufferBuilder fbb(64 + caller.size() + patch.size());
  const Offset c = fbb.CreateString(caller), p = fbb.CreateString(patch);
  return finish_envelope(fbb, 0, wire::Payload::EditProgram, wire::CreateEditProgram(fbb, c, p).Union());
}

Frame encode_tool_result(const std::string& text) {
  flatbuffers::FlatBufferBuilder fbb(64 + text.size());
  const Offset t = fbb.CreateString(text);
  return finish_envelope(fbb, 0, wire::Payload::ToolResult, wire::CreateToolResult(fbb, t).Union());
}

Frame encode_sandbox_cool() {
  flatbuffers::FlatBufferBuilder fbb(48);
  return finish_envelope(fbb, 0, wire::Payload::SandboxCool, wire::CreateSandboxCool(fbb).Union());
}

Frame encode_sandbox_warm() {
  flatbuffers::FlatBufferBuilder fbb(48);
  return finish_envelope(fbb, 0, wire::Payload::SandboxWarm, wire::CreateSandboxWarm(fbb).Union());
}

Result<RoleMessage> decode_role(std::span<const uint8_t> frame) {
  auto summary = decode_envelope(frame);
  if (!summary) return summary.error();
  const wire::Envelope* env = wire::GetEnvelope(frame.data());
  RoleMessage m;
  switch (env->payload_type()) {
    case wire::Payload::Signal: {
      const auto* p = env->payload_as_Signal();
      m.kind = RoleKind::signal;
      m.event = fb_str(p->event());
      m.text = fb_str(p->text());
      break;
    }
    case wire::Payload::RoleText: {
      const auto* p = env->payload_as_RoleText();
      m.kind = RoleKind::text;
      m.text = fb_str(p->text());
      m.producer = fb_str(p->producer());
      break;
    }
    case wire::Payload::FeedEnded: m.kind = RoleKind::feed_ended; break;
    case wire::Payload::TokensMade:
      m.kind = RoleKind::tokens;
      m.count = env->payload_as_TokensMade()->count();
      break;
    case wire::Payload::RoleFailed: {
      const auto* p = env->payload_as_RoleFailed();
      m.kind = RoleKind::failed;
      m.actor = fb_str(p->actor());
      m.text = fb_str(p->what());
      break;
    }
    case wire::Payload::StartRole:
      m.kind = RoleKind::start;
      m.names = fb_strs(env->payload_as_StartRole()->carried());
      break;
    case wire::Payload::Upstream:
      m.kind = RoleKind::upstream;
      m.names = fb_strs(env->payload_as_Upstream()->emitters());
      break;
    case wire::Payload::RetireRole: m.kind = RoleKind::retire; break;
    case wire::Payload::Retired:
      m.kind = RoleKind::retired;
      m.names = fb_strs(env->payload_as_Retired()->queued());
      break;
    case wire::Payload::ToolCall: {
      const auto* p = env->payload_as_ToolCall();
      m.kind = RoleKind::tool_call;
      m.tool = fb_str(p->tool());
      m.text = fb_str(p->arguments());
      m.actor = fb_str(p->caller());
      break;
    }
    case wire::Payload::EditProgram: {
      const auto* p = env->payload_as_EditProgram();
      m.kind = RoleKind::edit_program;
      m.actor = fb_str(p->caller());
      m.text = fb_str(p->patch());
      break;
    }
    case wire::Payload::ToolResult:
      m.kind = RoleKind::tool_result;
      m.text = fb_str(env->payload_as_ToolResult()->text());
      break;
    case wire::Payload::SandboxCool: m.kind = RoleKind::sandbox_cool; break;
    case wire::Payload::SandboxWarm: m.kind = RoleKind::sandbox_warm; break;
    default:
      return make_error(Errc::bad_format,
                        "not a message between a program's actors: " + summary->payload_type);
  }
  return m;
}

}  // namespace chorus
