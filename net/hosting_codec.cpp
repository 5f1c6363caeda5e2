#include "net/hosting_codec.h"

#include "net/envelope_finish.h"
#include "net/fb_read.h"
#include "net/wire.h"

namespace chorus {
namespace {

using Strings = flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>>;

flatbuffers::Offset<wire::ToolSpec> tool_spec(flatbuffers::FlatBufferBuilder& fbb, const ToolSpecData& t) {
  const auto name = fbb.CreateString(t.name);
  const Strings command = fbb.CreateVectorOfStrings(t.command), setup = fbb.CreateVectorOfStrings(t.setup),
                env = fbb.CreateVectorOfStrings(t.env), read = fbb.CreateVectorOfStrings(t.read),
                write = fbb.CreateVectorOfStrings(t.write);
  return wire::CreateToolSpec(fbb, name, command, setup, t.timeout_s, t.max_output_bytes, t.max_dir_bytes,
                              env, t.network, read, write);
}

}  // namespace

Frame encode_host_sink(uint64_t request_id, uint64_t program, const std::string& program_name,
                       const SinkSpecData& sink) {
  flatbuffers::FlatBufferBuilder fbb(256);
  const auto pn = fbb.CreateString(program_name);
  const auto spec = wire::CreateSinkSpec(fbb, fbb.CreateString(sink.name), static_cast<wire::SinkTo>(sink.to),
                                         fbb.CreateString(sink.path), fbb.CreateString(sink.endpoint),
                                         fbb.CreateString(sink.topic), fbb.CreateString(sink.prefix));
  return finish_envelope(fbb, request_id, wire::Payload::HostSink,
                         wire::CreateHostSink(fbb, program, pn, spec).Union());
}

Frame encode_host_sandbox(uint64_t request_id, uint64_t program, const std::string& program_name,
                          const std::string& actor, const std::vector<ToolSpecData>& tools) {
  flatbuffers::FlatBufferBuilder fbb(512);
  const auto pn = fbb.CreateString(program_name), a = fbb.CreateString(actor);
  std::vector<flatbuffers::Offset<wire::ToolSpec>> specs;
  for (const ToolSpecData& t : tools) specs.push_back(tool_spec(fbb, t));
  const auto v = fbb.CreateVector(specs);
  return finish_envelope(fbb, request_id, wire::Payload::HostSandbox,
                         wire::CreateHostSandbox(fbb, program, pn, a, v).Union());
}

Frame encode_hosted(uint64_t request_id, uint64_t program, const std::string& actor,
                    const std::string& node) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto a = fbb.CreateString(actor), n = fbb.CreateString(node);
  return finish_envelope(fbb, request_id, wire::Payload::Hosted,
                         wire::CreateHosted(fbb, program, a, n).Union());
}

Frame encode_deliver(uint64_t request_id, uint64_t program, const std::string& actor,
                     std::span<const uint8_t> frame) {
  flatbuffers::FlatBufferBuilder fbb(128 + frame.size());
  const auto a = fbb.CreateString(actor);
  const auto f = fbb.CreateVector(frame.data(), frame.size());
  return finish_envelope(fbb, request_id, wire::Payload::Deliver,
                         wire::CreateDeliver(fbb, program, a, f).Union());
}

Frame encode_unhost(uint64_t request_id, uint64_t program, const std::string& actor) {
  flatbuffers::FlatBufferBuilder fbb(64);
  const auto a = fbb.CreateString(actor);
  return finish_envelope(fbb, request_id, wire::Payload::Unhost, wire::CreateUnhost(fbb, program, a).Union());
}

Frame encode_host_feed(uint64_t request_id, uint64_t program, const std::string& program_name,
                       const std::string& actor, const FeedSpecData& feed) {
  flatbuffers::FlatBufferBuilder fbb(256);
  const auto pn = fbb.CreateString(program_name), a = fbb.CreateString(actor),
             path = fbb.CreateString(feed.path), ep = fbb.CreateString(feed.endpoint),
             topic = fbb.CreateString(feed.topic);
  return finish_envelope(fbb, request_id, wire::Payload::HostFeed,
                         wire::CreateHostFeed(fbb, program, pn, a, static_cast<wire::FeedFrom>(feed.from),
                                              path, feed.follow, ep, topic)
                             .Union());
}

Result<HostingMessage> decode_hosting(std::span<const uint8_t> frame) {
  auto summary = decode_envelope(frame);
  if (!summary) return summary.error();
  const wire::Envelope* env = wire::GetEnvelope(frame.data());
  HostingMessage m;
  m.request_id = env->request_id();
  switch (env->payload_type()) {
    case wire::Payload::HostSink: {
      const auto* p = env->payload_as_HostSink();
      m.kind = HostingMessage::Kind::host_sink;
      m.program = p->program();
      m.program_name = fb_str(p->program_name());
      const auto* s = p->sink();
      if (s == nullptr) return make_error(Errc::bad_format, "HostSink without its sink");
      if (s->to() > wire::SinkTo::MAX)
        return make_error(Errc::bad_format, "HostSink: an unknown kind of sink");
      m.sink.to = static_cast<SinkSpecData::To>(s->to());
      m.sink.name = fb_str(s->name());
      m.sink.path = fb_str(s->path());
      m.sink.endpoint = fb_str(s->endpoint());
      m.sink.topic = fb_str(s->topic());
      m.sink.prefix = fb_str(s->prefix());
      m.actor = m.sink.name;
      break;
    }
    case wire::Payload::HostSandbox: {
      const auto* p = env->payload_as_HostSandbox();
      m.kind = HostingMessage::Kind::host_sandbox;
      m.program = p->program();
      m.program_name = fb_str(p->program_name());
      m.actor = fb_str(p->actor());
      if (p->tools())
        for (const auto* t : *p->tools()) {
          ToolSpecData d;
          d.name = fb_str(t->name());
          d.command = fb_strs(t->command());
          d.setup = fb_strs(t->setup());
          d.timeout_s = t->timeout_s();
          d.max_output_bytes = t->max_output_bytes();
          d.max_dir_bytes = t->max_dir_bytes();
          d.env = fb_strs(t->env());
          d.network = t->network();
          d.read = fb_strs(t->read());
          d.write = fb_strs(t->write());
          m.tools.push_back(std::move(d));
        }
      break;
    }
    case wire::Payload::Hosted: {
      const auto* p = env->payload_as_Hosted();
      m.kind = HostingMessage::Kind::hosted;
      m.program = p->program();
      m.actor = fb_str(p->actor());
      m.node = fb_str(p->node());
      break;
    }
    case wire::Payload::Deliver: {
      const auto* p = env->payload_as_Deliver();
      m.kind = HostingMessage::Kind::deliver;
      m.program = p->program();
      m.actor = fb_str(p->actor());
      if (p->frame()) m.frame.assign(p->frame()->begin(), p->frame()->end());
      break;
    }
    case wire::Payload::HostFeed: {
      const auto* p = env->payload_as_HostFeed();
      m.kind = HostingMessage::Kind::host_feed;
      m.program = p->program();
      m.program_name = fb_str(p->program_name());
      m.actor = fb_str(p->actor());
      if (p->from() > wire::FeedFrom::MAX)
        return make_error(Errc::bad_format, "HostFeed: an unknown kind of feed");
      m.feed.from = static_cast<FeedSpecData::From>(p->from());
      m.feed.path = fb_str(p->path());
      m.feed.follow = p->follow();
      m.feed.endpoint = fb_str(p->endpoint());
      m.feed.topic = fb_str(p->topic());
      break;
    }
    case wire::Payload::Unhost:
      m.kind = HostingMessage::Kind::unhost;
      m.program = env->payload_as_Unhost()->program();
      m.actor = fb_str(env->payload_as_Unhost()->actor());
      break;
    default: return make_error(Errc::bad_format, "not a hosting message: " + summary->payload_type);
  }
  return m;
}

}  // namespace chorus
