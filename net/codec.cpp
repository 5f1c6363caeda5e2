#include "net/codec.h"

#include <cstring>
#include <optional>

#include "net/envelope_finish.h"
#include "net/wire.h"

namespace chorus {
namespace {

template <class T>
std::vector<T> to_vec(const flatbuffers::Vector<T>* v) {
  return v ? std::vector<T>(v->begin(), v->end()) : std::vector<T>{};
}

}  // namespace

Frame encode_create_block(uint64_t request_id, const std::string& name, uint64_t program) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto n = fbb.CreateString(name);
  return finish_envelope(fbb, request_id, wire::Payload::CreateBlock,
                         wire::CreateCreateBlock(fbb, n, program).Union());
}

Frame encode_program(uint64_t request_id, const ProgramCmd& c) {
  flatbuffers::FlatBufferBuilder fbb;
  switch (c.op) {
    case ProgramCmd::Op::register_program: {
      const auto name = fbb.CreateString(c.name);
      const auto blocks = fbb.CreateVector(c.blocks);
      return finish_envelope(fbb, request_id, wire::Payload::RegisterProgram,
                             wire::CreateRegisterProgram(fbb, c.program, name, blocks, c.hold).Union());
    }
    case ProgramCmd::Op::pause:
      return finish_envelope(
          fbb, request_id, wire::Payload::PauseProgram,
          wire::CreatePauseProgram(
              fbb, c.program, c.mode == PauseMode::offload ? wire::PauseMode::offload : wire::PauseMode::drop)
              .Union());
    case ProgramCmd::Op::restore:
      return finish_envelope(fbb, request_id, wire::Payload::RestoreProgram,
                             wire::CreateRestoreProgram(fbb, c.program).Union());
    case ProgramCmd::Op::terminate:
      return finish_envelope(fbb, request_id, wire::Payload::TerminateProgram,
                             wire::CreateTerminateProgram(fbb, c.program, c.cancel).Union());
    case ProgramCmd::Op::phase:
      return finish_envelope(
          fbb, request_id, wire::Payload::ProgramPhase,
          wire::CreateProgramPhase(fbb, c.program, c.acting ? wire::Phase::acting : wire::Phase::reasoning, 0)
              .Union());
    case ProgramCmd::Op::withdraw:
      return finish_envelope(fbb, request_id, wire::Payload::WithdrawRequest,
                             wire::CreateWithdrawRequest(fbb, c.program, c.request).Union());
  }
  return {};
}

Frame encode_program_status(uint64_t request_id, uint64_t program, ProgramState state,
                            uint32_t resident_pages, uint64_t tokens, bool acting, uint32_t pending,
                            uint32_t held, uint32_t wanted_pages, uint32_t slots, uint32_t wanted_slots) {
  flatbuffers::FlatBufferBuilder fbb;
  return finish_envelope(
      fbb, request_id, wire::Payload::ProgramStatus,
      wire::CreateProgramStatus(fbb, program, static_cast<wire::ProgramState>(state),
                                acting ? wire::Phase::acting : wire::Phase::reasoning, resident_pages, tokens,
                                pending, held, wanted_pages, slots, wanted_slots)
          .Union());
}

Frame encode_free_block(uint64_t request_id, BlockId block) {
  flatbuffers::FlatBufferBuilder fbb;
  return finish_envelope(fbb, request_id, wire::Payload::FreeBlock,
                         wire::CreateFreeBlock(fbb, block).Union());
}

Frame encode_clear_block(uint64_t request_id, BlockId block) {
  flatbuffers::FlatBufferBuilder fbb;
  return finish_envelope(fbb, request_id, wire::Payload::ClearBlock,
                         wire::CreateClearBlock(fbb, block).Union());
}

Frame encode_merge_blocks(uint64_t request_id, BlockId a, BlockId b, const std::string& name) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto n = fbb.CreateString(name);
  return finish_envelope(fbb, request_id, wire::Payload::MergeBlocks,
                         wire::CreateMergeBlocks(fbb, a, b, n).Union());
}

Frame encode_fork_block(uint64_t request_id, BlockId block, int64_t tokens, const std::string& name,
                        uint64_t program) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto n = fbb.CreateString(name);
  return finish_envelope(fbb, request_id, wire::Payload::ForkBlock,
                         wire::CreateForkBlock(fbb, block, tokens, n, program).Union());
}

Frame encode_export_block(uint64_t request_id, BlockId block, uint64_t offset, uint64_t max_bytes) {
  flatbuffers::FlatBufferBuilder fbb;
  return finish_envelope(fbb, request_id, wire::Payload::ExportBlock,
                         wire::CreateExportBlock(fbb, block, offset, max_bytes).Union());
}

namespace {

flatbuffers::Offset<wire::BlockPart> block_part(flatbuffers::FlatBufferBuilder& fbb, const BlockPartData& p,
                                                std::span<const std::byte> bytes) {
  const auto tokens = p.tokens.empty() ? 0 : fbb.CreateVector(p.tokens);
  const auto format = p.format.empty() ? 0 : fbb.CreateString(p.format);
  const auto kv = fbb.CreateVector(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return wire::CreateBlockPart(fbb, p.block, tokens, format, p.total, p.offset, kv, p.cached);
}

BlockPartData part_of(const wire::BlockPart* p) {
  BlockPartData d;
  d.block = p->block();
  d.tokens = to_vec(p->tokens());
  d.format = p->format() ? p->format()->str() : "";
  d.cached = p->cached();
  d.total = p->total();
  d.offset = p->offset();
  if (const auto* kv = p->kv(); kv && kv->size() > 0) {  // (a memcpy to an empty vector's null: UB)
    d.kv.resize(kv->size());
    std::memcpy(d.kv.data(), kv->data(), kv->size());
  }
  return d;
}

}  // namespace

Frame encode_block_part(uint64_t request_id, const BlockPartData& part, std::span<const std::byte> kv) {
  flatbuffers::FlatBufferBuilder fbb(kv.size() + 4 * part.tokens.size() + 1024);
  return finish_envelope(fbb, request_id, wire::Payload::BlockPart, block_part(fbb, part, kv).Union());
}

Frame encode_load_block(uint64_t request_id, const BlockPartData& part) {
  flatbuffers::FlatBufferBuilder fbb(part.kv.size() + 4 * part.tokens.size() + 1024);
  const auto p = block_part(fbb, part, part.kv);
  return finish_envelope(fbb, request_id, wire::Payload::LoadBlock, wire::CreateLoadBlock(fbb, p).Union());
}

Frame encode_request(uint64_t request_id, const Request& r, const std::string& text) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto view = fbb.CreateVector(r.view);
  const auto tokens = fbb.CreateVector(r.tokens);
  const auto txt = text.empty() ? 0 : fbb.CreateString(text);
  switch (r.kind) {
    case RequestKind::forward:
      return finish_envelope(fbb, request_id, wire::Payload::Forward,
                             wire::CreateForward(fbb, view, r.write_to, tokens, txt).Union());
    case RequestKind::append:
      return finish_envelope(fbb, request_id, wire::Payload::AppendTokens,
                             wire::CreateAppendTokens(fbb, r.write_to, view, tokens).Union());
    case RequestKind::generate: {
      const auto& s = r.sampling;
      std::vector<int32_t> bias_tokens;
      std::vector<float> bias_values;
      for (const auto& [t, b] : s.logit_bias) {
        bias_tokens.push_back(t);
        bias_values.push_back(b);
      }
      const auto sampling = wire::CreateSampling(
          fbb, s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.seed,
          fbb.CreateVector(s.forbidden), static_cast<uint8_t>(s.constraint.kind),
          s.constraint.empty() ? 0 : fbb.CreateString(s.constraint.schema), s.presence_penalty,
          s.frequency_penalty, bias_tokens.empty() ? 0 : fbb.CreateVector(bias_tokens),
          bias_values.empty() ? 0 : fbb.CreateVector(bias_values), s.logprobs);
      const auto stop =
          wire::CreateStop(fbb, fbb.CreateVectorOfStrings(r.stop.strings), fbb.CreateVector(r.stop.token_ids),
                           r.stop.max_tokens, r.stop.at_end_of_generation);
      return finish_envelope(
          fbb, request_id, wire::Payload::Generate,
          wire::CreateGenerate(fbb, view, r.write_to, tokens, sampling, stop, txt).Union());
    }
    case RequestKind::probe: {
      std::vector<flatbuffers::Offset<wire::Candidate>> cands;
      for (const auto& c : r.candidates) cands.push_back(wire::CreateCandidate(fbb, fbb.CreateVector(c)));
      return finish_envelope(fbb, request_id, wire::Payload::Probe,
                             wire::CreateProbe(fbb, view, tokens, fbb.CreateVector(cands), txt).Union());
    }
  }
  return {};
}

namespace {

// CreateBlock, SnapshotView, FreeBlock, ClearBlock, MergeBlocks, ForkBlock.
std::optional<Command> block_command(const wire::Envelope* env) {
  using Op = BlockOpCmd::Op;
  auto name = [](const flatbuffers::String* n) { return n ? n->str() : std::string(); };
  if (const auto* c = env->payload_as_CreateBlock())
    return Command{CreateBlockCmd{name(c->name()), c->program()}};
  if (const auto* v = env->payload_as_SnapshotView())
    return Command{SnapshotViewCmd{to_vec(v->view()), v->logs()}};
  if (env->payload_as_ListPrograms()) return Command{ListProgramsCmd{}};
  if (const auto* f = env->payload_as_FreeBlock())
    return Command{BlockOpCmd{.op = Op::free, .block = f->block()}};
  if (const auto* c = env->payload_as_ClearBlock())
    return Command{BlockOpCmd{.op = Op::clear, .block = c->block()}};
  if (const auto* m = env->payload_as_MergeBlocks())
    return Command{BlockOpCmd{Op::merge, m->a(), m->b(), 0, name(m->name())}};
  if (const auto* f = env->payload_as_ForkBlock())
    return Command{BlockOpCmd{Op::fork, f->block(), -1, f->tokens(), name(f->name()), f->program()}};
  if (const auto* e = env->payload_as_ExportBlock())
    return Command{BlockOpCmd{
        .op = Op::export_part, .block = e->block(), .offset = e->offset(), .max_bytes = e->max_bytes()}};
  if (const auto* l = env->payload_as_LoadBlock()) {
    if (!l->part()) return std::nullopt;
    auto part = std::make_shared<BlockPartData>(part_of(l->part()));
    return Command{BlockOpCmd{.op = Op::load_part, .block = part->block, .part = part}};
  }
  return std::nullopt;
}

// RegisterProgram, PauseProgram, RestoreProgram, TerminateProgram, WithdrawRequest, ProgramPhase.
std::optional<Command> program_command(const wire::Envelope* env) {
  using Op = ProgramCmd::Op;
  ProgramCmd c;
  if (const auto* p = env->payload_as_RegisterProgram()) {
    c = ProgramCmd::of(Op::register_program, p->program());
    c.name = p->name() ? p->name()->str() : "";
    c.blocks = to_vec(p->blocks());
    c.hold = p->hold();
  } else if (const auto* p = env->payload_as_PauseProgram()) {
    c = ProgramCmd::of(Op::pause, p->program());
    c.mode = p->mode() == wire::PauseMode::offload ? PauseMode::offload : PauseMode::drop;
  } else if (const auto* p = env->payload_as_RestoreProgram()) {
    c = ProgramCmd::of(Op::restore, p->program());
  } else if (const auto* p = env->payload_as_TerminateProgram()) {
    c = ProgramCmd::of(Op::terminate, p->program());
    c.cancel = p->cancel();
  } else if (const auto* p = env->payload_as_WithdrawRequest()) {
    c = ProgramCmd::of(Op::withdraw, p->program());
    c.request = p->request_id();
  } else if (const auto* p = env->payload_as_ProgramPhase()) {
    c = ProgramCmd::of(Op::phase, p->program());
    c.acting = p->phase() == wire::Phase::acting;
  } else {
    return std::nullopt;
  }
  return Command{std::move(c)};
}

SamplingParams sampling_of(const wire::Sampling* s) {
  SamplingParams sp;
  if (!s) return sp;
  sp.temperature = s->temperature();
  sp.top_k = s->top_k();
  sp.top_p = s->top_p();
  sp.min_p = s->min_p();
  sp.repeat_penalty = s->repeat_penalty();
  sp.seed = s->seed();
  sp.forbidden = to_vec(s->forbidden());
  sp.constraint.kind = static_cast<OutputConstraint::Kind>(s->constraint_kind());
  if (s->schema()) sp.constraint.schema = s->schema()->str();
  sp.presence_penalty = s->presence_penalty();
  sp.frequency_penalty = s->frequency_penalty();
  const std::vector<int32_t> bias_tokens = to_vec(s->bias_tokens());
  const std::vector<float> bias_values = to_vec(s->bias_values());
  for (size_t i = 0; i < bias_tokens.size() && i < bias_values.size(); ++i)
    sp.logit_bias.emplace_back(bias_tokens[i], bias_values[i]);
  sp.logprobs = s->logprobs();
  return sp;
}

StopCondition stop_of(const wire::Stop* s) {
  StopCondition st;
  if (!s) return st;
  if (s->strings())
    for (const auto* str : *s->strings()) st.strings.push_back(str->str());
  st.token_ids = to_vec(s->token_ids());
  st.max_tokens = s->max_tokens();
  st.at_end_of_generation = s->at_end_of_generation();
  return st;
}

// Forward, Generate, Probe (with the text a field may carry, tokenized after its tokens).
Result<Command> request_command(const wire::Envelope* env, const std::string& payload_type,
                                const Tokenizer* tokenizer) {
  Request r;
  const flatbuffers::String* text = nullptr;
  if (const auto* f = env->payload_as_Forward()) {
    r = Request::forward(f->write_to(), to_vec(f->tokens()), to_vec(f->view()));
    text = f->text();
  } else if (const auto* g = env->payload_as_Generate()) {
    if (g->sampling() && g->sampling()->constraint_kind() > static_cast<uint8_t>(OutputConstraint::kLastKind))
      return make_error(Errc::invalid_argument, "Generate: Sampling.constraint_kind " +
                                                    std::to_string(g->sampling()->constraint_kind()) +
                                                    " is unknown");
    if (const wire::Sampling* s = g->sampling()) {
      const size_t nt = s->bias_tokens() ? s->bias_tokens()->size() : 0;
      const size_t nv = s->bias_values() ? s->bias_values()->size() : 0;
      if (nt != nv)
        return make_error(Errc::invalid_argument, "Generate: Sampling.bias_tokens has " + std::to_string(nt) +
                                                      " entries and bias_values " + std::to_string(nv));
      if (s->logprobs() > kMaxLogprobs)
        return make_error(Errc::invalid_argument, "Generate: Sampling.logprobs " +
                                                      std::to_string(s->logprobs()) + " is more than " +
                                                      std::to_string(kMaxLogprobs));
    }
    r = Request::generate(g->write_to(), to_vec(g->view()), to_vec(g->prefill()), sampling_of(g->sampling()),
                          stop_of(g->stop()));
    text = g->prefill_text();
  } else if (const auto* p = env->payload_as_Probe()) {
    std::vector<std::vector<TokenId>> cands;
    if (p->candidates())
      for (const auto* c : *p->candidates()) cands.push_back(to_vec(c->tokens()));
    r = Request::probe(to_vec(p->view()), to_vec(p->question()), std::move(cands));
    text = p->question_text();
  } else {
    return make_error(Errc::invalid_argument,
                      "a " + payload_type + " frame is not a command for the batcher");
  }
  if (text && text->size() > 0) {
    if (tokenizer == nullptr)
      return make_error(Errc::invalid_argument, "this receiver cannot tokenize text fields");
    const auto more = tokenizer->encode(text->string_view(), {.parse_special = true});
    r.tokens.insert(r.tokens.end(), more.begin(), more.end());
  }
  return Command{std::move(r)};
}

}  // namespace

Result<Command> decode_command(std::span<const uint8_t> frame, uint64_t* request_id,
                               const Tokenizer* tokenizer) {
  auto summary = decode_envelope(frame);
  if (!summary) return summary.error();
  *request_id = summary->request_id;
  const wire::Envelope* env = wire::GetEnvelope(frame.data());
  if (auto c = block_command(env)) return std::move(*c);
  if (auto c = program_command(env)) return std::move(*c);
  if (const auto* h = env->payload_as_Heartbeat())
    return Command{HeartbeatCmd{h->node_id() ? h->node_id()->str() : ""}};
  if (const auto* a = env->payload_as_AppendTokens()) {
    if (a->view() && a->view()->size() > 0)
      return make_error(Errc::invalid_argument,
                        "AppendTokens takes no view: its tokens run under the view of the next writer");
    return Command{Request::append(a->block(), to_vec(a->tokens()))};
  }
  return request_command(env, summary->payload_type, tokenizer);
}

Frame encode_block_info(uint64_t request_id, BlockId block, const std::string& name, int64_t tokens,
                        int64_t cached) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto n = fbb.CreateString(name);
  return finish_envelope(fbb, request_id, wire::Payload::BlockInfo,
                         wire::CreateBlockInfo(fbb, block, n, tokens, cached).Union());
}

Frame encode_snapshot_view(uint64_t request_id, const std::vector<BlockId>& view, bool logs) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto v = fbb.CreateVector(view);
  return finish_envelope(fbb, request_id, wire::Payload::SnapshotView,
                         wire::CreateSnapshotView(fbb, v, logs).Union());
}

Frame encode_list_programs(uint64_t request_id) {
  flatbuffers::FlatBufferBuilder fbb;
  return finish_envelope(fbb, request_id, wire::Payload::ListPrograms, wire::CreateListPrograms(fbb).Union());
}

Frame encode_program_list(uint64_t request_id, const std::vector<ProgramEntryData>& programs) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::ProgramEntry>> entries;
  for (const ProgramEntryData& p : programs)
    entries.push_back(wire::CreateProgramEntry(fbb, p.program, fbb.CreateString(p.name),
                                               fbb.CreateVector(p.blocks),
                                               static_cast<wire::ProgramState>(p.state), p.hold));
  const auto v = fbb.CreateVector(entries);
  return finish_envelope(fbb, request_id, wire::Payload::ProgramList,
                         wire::CreateProgramList(fbb, v).Union());
}

Frame encode_view_snapshot(uint64_t request_id, const std::vector<BlockSummary>& blocks) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::BlockInfo>> infos;
  for (const BlockSummary& b : blocks)
    infos.push_back(wire::CreateBlockInfo(fbb, b.block, fbb.CreateString(b.name), b.tokens, b.cached,
                                          b.log.empty() ? 0 : fbb.CreateVector(b.log)));
  const auto v = fbb.CreateVector(infos);
  return finish_envelope(fbb, request_id, wire::Payload::ViewSnapshot,
                         wire::CreateViewSnapshot(fbb, v).Union());
}

Frame encode_heartbeat(uint64_t request_id, const std::string& node_id, uint32_t pages_used,
                       uint32_t pages_total, uint32_t slots_used, uint32_t slots_total) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto id = fbb.CreateString(node_id);
  return finish_envelope(fbb, request_id, wire::Payload::Heartbeat,
                         wire::CreateHeartbeat(fbb, id, static_cast<uint64_t>(wall_clock_ms()), pages_used,
                                               pages_total, slots_used, slots_total)
                             .Union());
}

Frame encode_submitted(uint64_t request_id, RequestId request) {
  flatbuffers::FlatBufferBuilder fbb;
  return finish_envelope(fbb, request_id, wire::Payload::Submitted,
                         wire::CreateSubmitted(fbb, request).Union());
}

namespace {
flatbuffers::Offset<wire::TokenEvent> token_event(flatbuffers::FlatBufferBuilder& fbb, const Event& e,
                                                  const std::string& text) {
  if (e.logprobs.empty())
    return wire::CreateTokenEvent(fbb, e.request, e.block, e.token, fbb.CreateString(text), e.step);
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  for (size_t i = 1; i < e.logprobs.size(); ++i) {
    tokens.push_back(e.logprobs[i].token);
    logprobs.push_back(e.logprobs[i].logprob);
  }
  return wire::CreateTokenEvent(fbb, e.request, e.block, e.token, fbb.CreateString(text), e.step,
                                e.logprobs[0].logprob, fbb.CreateVector(tokens), fbb.CreateVector(logprobs));
}
}  // namespace

Frame encode_event(uint64_t request_id, const Event& e, const std::string& text) {
  flatbuffers::FlatBufferBuilder fbb;
  switch (e.type) {
    case Event::Type::token:
      return finish_envelope(fbb, request_id, wire::Payload::TokenEvent, token_event(fbb, e, text).Union());
    case Event::Type::probe_result:
      return finish_envelope(
          fbb, request_id, wire::Payload::ProbeResult,
          wire::CreateProbeResult(fbb, e.request, fbb.CreateVector(e.probabilities), e.step).Union());
    case Event::Type::finished:
      return finish_envelope(
          fbb, request_id, wire::Payload::RequestFinished,
          wire::CreateRequestFinished(fbb, e.request, e.block, static_cast<wire::Finish>(e.reason),
                                      fbb.CreateString(e.error), e.step)
              .Union());
  }
  return {};
}

Frame encode_node_lost(uint64_t request_id, RequestId request, const std::string& why) {
  flatbuffers::FlatBufferBuilder fbb;
  return finish_envelope(
      fbb, request_id, wire::Payload::RequestFinished,
      wire::CreateRequestFinished(fbb, request, -1, wire::Finish::error, fbb.CreateString(why), 0, true)
          .Union());
}

Result<Reply> decode_reply(std::span<const uint8_t> frame) {
  auto summary = decode_envelope(frame);
  if (!summary) return summary.error();
  const wire::Envelope* env = wire::GetEnvelope(frame.data());
  Reply r;
  static const std::pair<const char*, ReplyKind> kinds[] = {
      {"BlockInfo", ReplyKind::block_info},         {"ViewSnapshot", ReplyKind::view_snapshot},
      {"Submitted", ReplyKind::submitted},          {"TokenEvent", ReplyKind::token},
      {"ProbeResult", ReplyKind::probe_result},     {"RequestFinished", ReplyKind::finished},
      {"ProgramStatus", ReplyKind::program_status}, {"Error", ReplyKind::error},
      {"Heartbeat", ReplyKind::heartbeat},          {"ProgramWaiting", ReplyKind::program_waiting},
      {"BlockPart", ReplyKind::block_part},         {"ProgramList", ReplyKind::program_list},
      {"BlockGrown", ReplyKind::block_grown}};
  for (const auto& [name, kind] : kinds)
    if (summary->payload_type == name) r.kind = kind;
  auto summary_of = [](const wire::BlockInfo* b) {
    return BlockSummary{b->block(), b->name() ? b->name()->str() : "", b->tokens(), b->cached(),
                        to_vec(b->log())};
  };
  if (const auto* b = env->payload_as_BlockInfo()) {
    r.id = b->block();
    r.blocks = {summary_of(b)};
  } else if (const auto* l = env->payload_as_ProgramList()) {
    if (l->programs())
      for (const auto* e : *l->programs())
        r.programs.push_back({e->program(), e->name() ? e->name()->str() : "", to_vec(e->blocks()),
                              static_cast<ProgramState>(e->state()), e->hold()});
  } else if (const auto* p = env->payload_as_BlockPart()) {
    r.id = p->block();
    r.part = std::make_shared<BlockPartData>(part_of(p));
  } else if (const auto* v = env->payload_as_ViewSnapshot()) {
    if (v->blocks())
      for (const auto* b : *v->blocks()) r.blocks.push_back(summary_of(b));
  } else if (const auto* s = env->payload_as_Submitted())
    r.id = s->request();
  else if (const auto* t = env->payload_as_TokenEvent()) {
    r.id = t->request();
    r.token = t->token();
    r.text = t->text() ? t->text()->str() : "";
    if (t->top_tokens()) {  // logprobs were asked for: the token's, then its alternatives
      r.logprobs.push_back({t->token(), t->logprob()});
      const auto* lp = t->top_logprobs();
      for (flatbuffers::uoffset_t i = 0; i < t->top_tokens()->size(); ++i)
        r.logprobs.push_back({t->top_tokens()->Get(i), lp && i < lp->size() ? lp->Get(i) : 0.0f});
    }
  } else if (const auto* p = env->payload_as_ProbeResult()) {
    r.id = p->request();
    r.probabilities = to_vec(p->probabilities());
  } else if (const auto* f = env->payload_as_RequestFinished()) {
    r.id = f->request();
    r.reason = static_cast<FinishReason>(f->reason());
    r.node_lost = f->node_lost();
    r.text = f->error() ? f->error()->str() : "";
  } else if (const auto* ps = env->payload_as_ProgramStatus()) {
    r.id = static_cast<int64_t>(ps->program());
    r.state = static_cast<ProgramState>(ps->state());
    r.pages = ps->resident_pages();
    r.acting = ps->phase() == wire::Phase::acting;
    r.pending = ps->pending();
    r.held = ps->held();
    r.tokens = static_cast<int64_t>(ps->tokens());
    r.wanted_pages = ps->wanted_pages();
    r.slots = ps->slots();
    r.wanted_slots = ps->wanted_slots();
  } else if (const auto* w = env->payload_as_ProgramWaiting()) {
    r.id = static_cast<int64_t>(w->program());
  } else if (const auto* g = env->payload_as_BlockGrown()) {
    r.id = g->block();
    r.tokens = g->cached();
  } else if (const auto* h = env->payload_as_Heartbeat()) {
    r.text = h->node_id() ? h->node_id()->str() : "";
    r.unix_ms = h->unix_ms();
    r.pages = h->pages_used();
    r.pages_total = h->pages_total();
    r.slots = h->slots_used();
    r.slots_total = h->slots_total();
  } else if (const auto* e = env->payload_as_Error()) {
    r.text = e->message() ? e->message()->str() : "";
    const int code = static_cast<int>(e->code());
    r.code = code > 0 && code <= static_cast<int>(Errc::withdrawn) ? static_cast<Errc>(code) : Errc::internal;
  }
  return r;
}

const char* reply_kind_name(ReplyKind k) {
  switch (k) {
    case ReplyKind::block_info: return "BlockInfo";
    case ReplyKind::view_snapshot: return "ViewSnapshot";
    case ReplyKind::submitted: return "Submitted";
    case ReplyKind::token: return "TokenEvent";
    case ReplyKind::probe_result: return "ProbeResult";
    case ReplyKind::finished: return "RequestFinished";
    case ReplyKind::program_status: return "ProgramStatus";
    case ReplyKind::error: return "Error";
    case ReplyKind::heartbeat: return "Heartbeat";
    case ReplyKind::block_part: return "BlockPart";
    case ReplyKind::program_list: return "ProgramList";
    case ReplyKind::program_waiting: return "ProgramWaiting";
    case ReplyKind::block_grown: return "BlockGrown";
    case ReplyKind::other: return "other";
  }
  return "?";
}

}  // namespace chorus
