// The engine's records: into a Trace (engine/step/trace.h) — a step with its batch, the blocks'
// new tokens and text, requests' spans, pauses and restores; called only when a trace is set —
// and into its EngineCounters, every step.
#include <algorithm>
#include <map>

#include "engine/step/engine.h"
#include "engine/step/engine_internal.h"
#include "engine/step/trace.h"

namespace chorus {
namespace {

const char* kind_name(const Request& r) {
  switch (r.kind) {
    case RequestKind::forward: return "forward";
    case RequestKind::generate: return "generate";
    case RequestKind::probe: return "probe";
    case RequestKind::append: return "append";
  }
  return "?";
}

}  // namespace

void Engine::count_step(const std::vector<Planned>& plan) {
  int64_t decode = 0, prefill = 0, probe = 0;
  for (const Planned& p : plan) {
    const auto n = static_cast<int64_t>(p.tokens.size());
    if (p.a->req.kind == RequestKind::probe)
      probe += n;
    else if (p.a->req.kind == RequestKind::generate && p.a->decoding)
      decode += n;
    else
      prefill += n;
  }
  counters_->steps.fetch_add(1, std::memory_order_relaxed);
  counters_->decode_tokens.fetch_add(decode, std::memory_order_relaxed);
  counters_->prefill_tokens.fetch_add(prefill, std::memory_order_relaxed);
  counters_->probe_tokens.fetch_add(probe, std::memory_order_relaxed);
}

std::vector<Engine::TraceMark> Engine::trace_marks(const std::vector<Planned>& plan) const {
  std::vector<TraceMark> out;
  for (const Planned& p : plan) {
    auto b = blocks_->get(p.a->target);
    out.push_back(
        {p.a->target, b ? (*b)->tokens.size() : 0, p.a->req.kind == RequestKind::generate && p.a->decoding});
  }
  return out;
}

void Engine::trace_step(const std::vector<Planned>& plan, const std::vector<TraceMark>& before, int64_t t0) {
  const int64_t t1 = trace_->now_us();
  int64_t decode = 0, probe = 0, prefill = 0;
  std::string requests;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Active& a = *plan[i].a;
    const auto n = static_cast<int64_t>(plan[i].tokens.size());
    const bool is_probe = a.req.kind == RequestKind::probe;
    const char* what = is_probe ? "probe" : before[i].decode ? "decode" : "prefill";
    (is_probe ? probe : before[i].decode ? decode : prefill) += n;
    requests += std::string(requests.empty() ? "" : ",") + "{\"request\":" + std::to_string(a.id) +
                ",\"block\":" + std::to_string(a.target) + ",\"kind\":\"" + what +
                "\",\"tokens\":" + std::to_string(n) + "}";
  }
  trace_->complete("engine", "step", 1, 0, t0, t1 - t0,
                   "{\"step\":" + std::to_string(steps_) + ",\"decode\":" + std::to_string(decode) +
                       ",\"probe\":" + std::to_string(probe) + ",\"prefill\":" + std::to_string(prefill) +
                       ",\"requests\":[" + requests + "]}");
  std::map<BlockId, size_t> from;  // a block planned twice (never: one writer) counts from its first
  for (const TraceMark& m : before) from.emplace(m.block, m.length);
  for (const auto& [id, n0] : from) {
    auto b = blocks_->get(id);
    if (!b || (*b)->tokens.size() <= n0) continue;
    const Block& blk = **b;
    const std::vector<TokenId> added(blk.tokens.begin() + static_cast<long>(n0), blk.tokens.end());
    trace_->name_lane(
        2, id, blk.name.empty() ? "block " + std::to_string(id) : blk.name + " (" + std::to_string(id) + ")");
    trace_->instant("block", "append", 2, id, t1,
                    "{\"tokens\":" + std::to_string(added.size()) +
                        ",\"length\":" + std::to_string(blk.tokens.size()) +
                        ",\"text\":" + Trace::quote(model_.tokenizer.decode(added)) + "}");
  }
}

void Engine::trace_submit(const Active& a) {
  trace_->async_begin(
      "request", kind_name(a.req), a.id, trace_->now_us(),
      "{\"block\":" + std::to_string(a.target) + ",\"tokens\":" + std::to_string(a.req.tokens.size()) + "}");
}

void Engine::trace_finish(const Active& a, FinishReason why) {
  trace_->async_end("request", kind_name(a.req), a.id, trace_->now_us(),
                    "{\"reason\":" + Trace::quote(finish_reason_name(why)) +
                        ",\"generated\":" + std::to_string(a.generated) + "}");
}

void Engine::trace_blocks(const char* what, std::span<const BlockId> ids, const std::string& detail) {
  std::string list;
  for (BlockId b : ids) list += (list.empty() ? "" : ",") + std::to_string(b);
  trace_->name_lane(1, 1, "memory");
  trace_->instant(
      "memory", what, 1, 1, trace_->now_us(),
      "{\"blocks\":[" + list + "]" + (detail.empty() ? "" : ",\"mode\":" + Trace::quote(detail)) + "}");
}

}  // namespace chorus
