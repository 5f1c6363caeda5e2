// libFuzzer target for wire frames: any byte string given to the node port's decoders must
// decode or fail with an Error, never crash, hang or read outside the buffer (ASan+UBSan).
#include <cstddef>
#include <cstdint>

#include "net/codec.h"
#include "net/hosting_codec.h"
#include "net/role_codec.h"
#include "net/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> frame(data, size);
  if (auto env = chorus::decode_envelope(frame); env.ok()) {
    // A node link re-addresses every frame that verifies: the copy verifies, with the new id and
    // the same payload.
    auto moved = chorus::with_request_id(frame, env->request_id + 1);
    if (!moved.ok()) __builtin_trap();
    auto back = chorus::decode_envelope(*moved);
    if (!back.ok() || back->request_id != env->request_id + 1 || back->payload_type != env->payload_type)
      __builtin_trap();
  }
  uint64_t rid = 0;
  if (auto cmd = chorus::decode_command(frame, &rid); cmd.ok()) {
    // Touch what the batcher would read.
    if (auto* r = std::get_if<chorus::Request>(&*cmd)) {
      for (chorus::TokenId t : r->tokens) (void)t;
      for (const auto& s : r->stop.strings) (void)s.size();
    }
    if (auto* op = std::get_if<chorus::BlockOpCmd>(&*cmd); op && op->part)
      for (std::byte b : op->part->kv) (void)b;
  }
  if (auto rep = chorus::decode_reply(frame); rep.ok()) (void)rep->text.size();
  if (auto w = chorus::decode_watch_block(frame); w.ok()) (void)*w;
  if (auto m = chorus::decode_role(frame); m.ok())  // what a program's actors read
    for (const auto& n : m->names) (void)n.size();
  if (auto h = chorus::decode_hosting(frame); h.ok()) {  // what a node's actor host reads
    for (const auto& t : h->tools) (void)t.command.size();
    uint64_t inner = 0;  // a hosted probe's question, and what a Relay carries
    if (h->kind == chorus::HostingMessage::Kind::host_probe)
      (void)chorus::decode_command(h->probe.request, &inner);
    if (h->kind == chorus::HostingMessage::Kind::relay) (void)chorus::decode_role(h->frame);
  }
  return 0;
}
