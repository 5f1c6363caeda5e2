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

Frame encode_host_probe(uint64_t request_id, uint64_t program, const std::string& program_name,
                        const ProbeSpecData& p) {
  flatbuffers::FlatBufferBuilder fbb(512 + p.request.size());
  const auto pn = fbb.CreateString(program_name), name = fbb.CreateString(p.name),
             question = fbb.CreateString(p.question), fires = fbb.CreateString(p.fires);
  const auto request = fbb.CreateVector(p.request.data(), p.request.size());
  const auto fire_on = fbb.CreateVector(p.fire_on);
  const Strings on = fbb.CreateVectorOfStrings(p.on), after = fbb.CreateVectorOfStrings(p.after),
                upstream = fbb.CreateVectorOfStrings(p.upstream);
  const auto spec = wire::CreateProbeSpec(fbb, name, request, question, fire_on, p.threshold, p.edge, fires,
                                          p.watch, p.every_new_tokens, p.every_ms, on, after, upstream);
  return finish_envelope(fbb, request_id, wire::Payload::HostProbe,
                         wire::CreateHostProbe(fbb, program, pn, spec).Union());
}

Frame encode_relay(uint64_t request_id, uint64_t program, const std::string& actor, RelayTo to, uint64_t seq,
                   std::span<const uint8_t> frame, const std::string& text) {
  flatbuffers::FlatBufferBuilder fbb(128 + frame.size() + text.size());
  const auto a = fbb.CreateString(actor), t = fbb.CreateString(text);
  const auto f = fbb.CreateVector(frame.data(), frame.size());
  return finish_envelope(
      fbb, request_id, wire::Payload::Relay,
      wire::CreateRelay(fbb, program, a, static_cast<wire::RelayTo>(to), seq, f, t).Union());
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
    case wire::Payload::HostProbe: {
      const auto* p = env->payload_as_HostProbe();
      m.kind = HostingMessage::Kind::host_probe;
      m.program = p->program();
      m.program_name = fb_str(p->program_name());
      const auto* s = p->probe();
      if (s == nullptr || s->request() == nullptr)
        return make_error(Errc::bad_format, "HostProbe without its probe and its question");
      ProbeSpecData& d = m.probe;
      d.name = fb_str(s->name());
      d.request.assign(s->request()->begin(), s->request()->end());
      d.question = fb_str(s->question());
      if (s->fire_on()) d.fire_on.assign(s->fire_on()->begin(), s->fire_on()->end());
      d.threshold = s->threshold();
      d.edge = s->edge();
      d.fires = fb_str(s->fires());
      d.watch = s->watch();
      d.every_new_tokens = s->every_new_tokens();
      d.every_ms = s->every_ms();
      d.on = fb_strs(s->on());
      d.after = fb_strs(s->after());
      d.upstream = fb_strs(s->upstream());
      if (d.name.empty()) return make_error(Errc::bad_format, "HostProbe: a probe without a name");
      if (d.every_ms < 0 || d.every_new_tokens < 0)
        return make_error(Errc::bad_format, "HostProbe: a negative period");
      m.actor = d.name;
      break;
    }
    case wire::Payload::Relay: {
      const auto* p = env->payload_as_Relay();
      m.kind = HostingMessage::Kind::relay;
      m.program = p->program();
      m.actor = fb_str(p->actor());
      if (p->to() > wire::RelayTo::MAX) return make_error(Errc::bad_format, "Relay: an unknown direction");
      m.to = static_cast<RelayTo>(p->to());
      m.seq = p->seq();
      m.text = fb_str(p->text());
      if (p->frame()) m.frame.assign(p->frame()->begin(), p->frame()->end());
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
