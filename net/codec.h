// FlatBuffers <-> engine types for the batcher's protocol (schemas/requests.fbs, blocks.fbs,
// events.fbs). Clients (role actors, the node port, the Python client) build frames with the
// encode_* functions or the generated code; the batcher decodes them with decode_command().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "engine/sched/program_state.h"
#include "engine/step/engine.h"

namespace chorus {

using Frame = std::vector<uint8_t>;

// Client side.
Frame encode_create_block(uint64_t request_id, const std::string& name, uint64_t program = 0);
Frame encode_free_block(uint64_t request_id, BlockId block);
Frame encode_clear_block(uint64_t request_id, BlockId block);
Frame encode_merge_blocks(uint64_t request_id, BlockId a, BlockId b, const std::string& name);
// `program` (not 0): the registered program the fork joins.
Frame encode_fork_block(uint64_t request_id, BlockId block, int64_t tokens, const std::string& name,
                        uint64_t program = 0);
// With `logs`, each block's token log comes back too (BlockSummary::log).
Frame encode_snapshot_view(uint64_t request_id, const std::vector<BlockId>& view, bool logs = false);
Frame encode_list_programs(uint64_t request_id);
// Forward, Generate or Probe. `text`, if given, is tokenized by the receiver (control tokens
// recognised) and appended to the request's tokens: Forward text, Generate prefill_text, Probe
// question_text (an actors-only node's probe fills in its question and leaves tokenizing to the
// node of the program's blocks).
Frame encode_request(uint64_t request_id, const Request& r, const std::string& text = {});

// A part of a block image (schemas/blocks.fbs BlockPart): the answer to an ExportBlock, and what
// a LoadBlock carries.
struct BlockPartData {
  BlockId block = -1;
  std::vector<TokenId> tokens;  // the log: in the part at offset 0
  int64_t cached = 0;           // the positions the KV covers: in the part at offset 0
  std::string format;           // the pages' format: in the part at offset 0
  uint64_t total = 0;           // KV bytes in all
  uint64_t offset = 0;          // of this part's first byte
  std::vector<std::byte> kv;
};
inline constexpr uint64_t kBlockPartBytes = 32u << 20;  // a part's KV bytes by default, and at most
Frame encode_export_block(uint64_t request_id, BlockId block, uint64_t offset, uint64_t max_bytes = 0);
// `kv`: the part's bytes (part.kv is not read: a part is cut from an image without a copy).
Frame encode_block_part(uint64_t request_id, const BlockPartData& part, std::span<const std::byte> kv);
Frame encode_load_block(uint64_t request_id, const BlockPartData& part);

// What a frame asks the batcher to do.
struct CreateBlockCmd {
  std::string name;
  uint64_t program = 0;  // a registered program the block joins (0: none)
};
struct BlockOpCmd {  // FreeBlock, ClearBlock, MergeBlocks, ForkBlock, ExportBlock, LoadBlock
  enum class Op { free, clear, merge, fork, export_part, load_part } op = Op::free;
  BlockId block = -1;                        // free, clear, fork: the block; merge: the first block
  BlockId second = -1;                       // merge: the second block
  int64_t tokens = 0;                        // fork: how many leading tokens
  std::string name = {};                     // merge, fork: the new block's name
  uint64_t program = 0;                      // fork: a registered program the new block joins (0: none)
  uint64_t offset = 0, max_bytes = 0;        // export_part: where the part starts, its size at most
  std::shared_ptr<BlockPartData> part = {};  // load_part: the part (its block is `block`)
};
struct ProgramCmd {  // RegisterProgram, PauseProgram, RestoreProgram, TerminateProgram, ProgramPhase,
                     // WithdrawRequest
  enum class Op { register_program, pause, restore, terminate, phase, withdraw } op = Op::register_program;
  uint64_t program = 0;
  std::string name;
  std::vector<BlockId> blocks;  // register
  PauseMode mode = PauseMode::drop;
  bool hold = false;     // register: requests wait while it is paused (schemas/programs.fbs)
  bool acting = false;   // phase: a tool runs (else reasoning)
  bool cancel = false;   // terminate: end the requests that use its blocks first
  uint64_t request = 0;  // withdraw: the envelope request id of the waiting request

  // A command of `op` for `program`, the other fields at their defaults.
  static ProgramCmd of(Op op, uint64_t program, PauseMode mode = PauseMode::drop) {
    ProgramCmd c;
    c.op = op;
    c.program = program;
    c.mode = mode;
    return c;
  }
};
struct SnapshotViewCmd {
  std::vector<BlockId> view;
  bool logs = false;
};
struct ListProgramsCmd {};
struct HeartbeatCmd {  // a Heartbeat frame sent to a node: answered with the node's own Heartbeat
  std::string node_id;
};
using Command = std::variant<CreateBlockCmd, BlockOpCmd, Request, ProgramCmd, SnapshotViewCmd, HeartbeatCmd,
                             ListProgramsCmd>;
Frame encode_program(uint64_t request_id, const ProgramCmd& cmd);

// Verifies the frame (decode_envelope) and extracts the command; text fields are tokenized with
// `tokenizer` (control tokens recognised). Errors name what is wrong (a frame that is not a
// command, text without a tokenizer).
Result<Command> decode_command(std::span<const uint8_t> frame, uint64_t* request_id,
                               const Tokenizer* tokenizer = nullptr);

// Batcher side: replies and events.
Frame encode_block_info(uint64_t request_id, BlockId block, const std::string& name, int64_t tokens,
                        int64_t cached);
Frame encode_submitted(uint64_t request_id, RequestId request);
Frame encode_program_status(uint64_t request_id, uint64_t program, ProgramState state,
                            uint32_t resident_pages, uint64_t tokens, bool acting = false,
                            uint32_t pending = 0, uint32_t held = 0, uint32_t wanted_pages = 0,
                            uint32_t slots = 0, uint32_t wanted_slots = 0);
Frame encode_event(uint64_t request_id, const Event& e, const std::string& text);
struct BlockSummary {  // a BlockInfo
  BlockId block = -1;
  std::string name;
  int64_t tokens = 0;             // in the block's log
  int64_t cached = 0;             // of which have KV (what readers see)
  std::vector<TokenId> log = {};  // the log itself, when asked for (SnapshotView logs)
  bool operator==(const BlockSummary&) const = default;
};
struct ProgramEntryData {  // a ProgramEntry
  uint64_t program = 0;
  std::string name;
  std::vector<BlockId> blocks;
  ProgramState state = ProgramState::active;
  bool hold = false;
};
Frame encode_program_list(uint64_t request_id, const std::vector<ProgramEntryData>& programs);
Frame encode_view_snapshot(uint64_t request_id, const std::vector<BlockSummary>& blocks);
// A Heartbeat: the sender's node id, its KV pool (and linear-state slots) and its clock
// (wall_clock_ms, stamped here) — for cluster liveness and placement, and a scheduler's
// capacities; a client sends one with its own id and gets the node's back.
Frame encode_heartbeat(uint64_t request_id, const std::string& node_id, uint32_t pages_used,
                       uint32_t pages_total, uint32_t slots_used = 0, uint32_t slots_total = 0);

// A RequestFinished with reason error and node_lost: the node running `request` went away
// (cluster/node_link.h); the gateway resumes such a turn on another node.
Frame encode_node_lost(uint64_t request_id, RequestId request, const std::string& why);

// Client side: what came back, by the frame's payload (schemas/envelope.fbs).
enum class ReplyKind {
  block_info,       // BlockInfo
  view_snapshot,    // ViewSnapshot
  submitted,        // Submitted
  token,            // TokenEvent
  probe_result,     // ProbeResult
  finished,         // RequestFinished
  program_status,   // ProgramStatus
  error,            // Error
  heartbeat,        // Heartbeat
  program_waiting,  // ProgramWaiting (id: the program)
  block_part,       // BlockPart (part)
  program_list,     // ProgramList (programs)
  block_grown,      // BlockGrown (id: the block, tokens: its cached positions)
  other,            // a payload that is not a reply (a command, Hello)
};
const char* reply_kind_name(ReplyKind k);  // the payload's name, e.g. "BlockInfo"

struct Reply {
  ReplyKind kind = ReplyKind::other;
  Errc code = Errc::ok;                // Error: its class, as the batcher (or node) gave it
  int64_t id = -1;                     // block id (BlockInfo) or request id (others)
  TokenId token = -1;                  // TokenEvent
  std::string text;                    // TokenEvent text, Error message
  std::vector<float> probabilities;    // ProbeResult
  std::vector<TokenLogprob> logprobs;  // TokenEvent, when asked for: the token's, then alternatives
  FinishReason reason = FinishReason::completed;  // RequestFinished
  bool node_lost = false;                         // RequestFinished: its node went away
  ProgramState state = ProgramState::active;      // ProgramStatus
  int64_t pages = 0;                              // ProgramStatus: resident pages
  bool acting = false;                            // ProgramStatus: its last reported phase
  int64_t pending = 0, held = 0;                  // ProgramStatus: request holds on its blocks; requests held
  int64_t tokens = 0;                             // ProgramStatus: tokens in its blocks
  int64_t wanted_pages = 0;                       // ProgramStatus: pages its requests may still take
  int64_t slots = 0, wanted_slots = 0;            // ProgramStatus: linear-state slots held, and wanted;
                                                  // Heartbeat: slots in use (slots_total: all)
  int64_t slots_total = 0;
  int64_t pages_total = 0;                 // Heartbeat: the pool (pages: those in use)
  uint64_t unix_ms = 0;                    // Heartbeat
  std::vector<BlockSummary> blocks;        // BlockInfo (one), ViewSnapshot (one per block)
  std::shared_ptr<BlockPartData> part;     // BlockPart
  std::vector<ProgramEntryData> programs;  // ProgramList
};
// A frame that does not verify is an error; an Error frame is a Reply of kind error (its code
// and message kept). ask() (actors/submit.h) turns the latter into the same Error.
Result<Reply> decode_reply(std::span<const uint8_t> frame);

}  // namespace chorus
