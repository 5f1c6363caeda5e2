// Writes one valid frame of each kind the node port accepts or sends into DIR, as seeds for
// frame_fuzz:  frame_seeds DIR
#include <cstdio>
#include <string>
#include <vector>

#include "net/codec.h"
#include "net/hosting_codec.h"
#include "net/role_codec.h"
#include "net/wire.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: frame_seeds DIR\n");
    return 2;
  }
  using namespace chorus;
  StopCondition stop;
  stop.strings = {"\n"};
  stop.max_tokens = 8;
  Event token{Event::Type::token, 3, 1, 42, {}, FinishReason::completed, "", 7};
  Event probe{Event::Type::probe_result, 4, -1, -1, {0.25f, 0.75f}, FinishReason::completed, "", 8};
  Event done{Event::Type::finished, 3, 1, -1, {}, FinishReason::error, "it broke", 9};
  ProgramCmd reg{ProgramCmd::Op::register_program, 5, "agent", {0, 1}, PauseMode::drop};
  ProgramCmd pause{ProgramCmd::Op::pause, 5, "", {}, PauseMode::offload};
  ProgramCmd end{ProgramCmd::Op::terminate, 5, "", {}, PauseMode::drop};
  end.cancel = true;
  ProgramCmd phase{ProgramCmd::Op::phase, 5, "", {}, PauseMode::drop};
  phase.acting = true;
  BlockPartData part;
  part.block = 2;
  part.tokens = {1, 2, 3, 4};
  part.cached = 3;
  part.format = "f32/L2/D8";
  part.total = 4096;
  part.kv.resize(64, std::byte{7});
  const std::vector<std::pair<std::string, Frame>> seeds = {
      {"export", encode_export_block(27, 2, 0, 1024)},
      {"block_part", encode_block_part(28, part, part.kv)},
      {"load", encode_load_block(29, part)},
      {"list_programs", encode_list_programs(30)},
      {"watch_block", encode_watch_block(34, 2)},
      {"block_grown", encode_block_grown(2, 117)},
      {"role_signal", encode_signal("thinker.paragraph", "First idea.\n\n")},
      {"role_text", encode_role_text("a line\n", "writer#2")},
      {"role_start", encode_start_role({"queued run"})},
      {"role_tool_call", encode_tool_call("add", "{\"a\": 1}", "thinker")},
      {"role_edit", encode_edit_program("planner", "actors:\n  w1: {kind: thinker}\n")},
      {"role_retired", encode_retired({"a", "b"})},
      {"role_tokens", encode_tokens_made(3)},
      {"host_sink",
       encode_host_sink(40, 9, "agent", SinkSpecData{SinkSpecData::To::file, "log", "/tmp/x", "", "", ""})},
      {"host_sandbox",
       encode_host_sandbox(41, 9, "agent", "sandbox",
                           {ToolSpecData{"add", {"true"}, {}, 1, 10, 1 << 20, {"A=1"}, false, {}, {}}})},
      {"deliver", encode_deliver(42, 9, "log", encode_role_text("hi\n"))},
      {"unhost", encode_unhost(43, 9)},
      {"host_probe",
       [] {
         ProbeSpecData p;
         p.name = "watch";
         p.request = encode_request(0, Request::probe({0}, {5, 6}, {{1}, {2}}));
         p.question = "Line: {{event}}Level:";
         p.fire_on = {0};
         p.fires = "incident";
         p.on = {"new_line"};
         p.upstream = {"tail"};
         return encode_host_probe(44, 9, "agent", p);
       }()},
      {"relay_engine", encode_relay(45, 9, "watch", RelayTo::engine, 3,
                                    encode_request(0, Request::probe({0}, {}, {{1}}), "Line: x\nLevel:"))},
      {"relay_role", encode_relay(46, 9, "watch", RelayTo::role, 0, encode_signal("new_line", "x\n"))},
      {"program_list", encode_program_list(31, {{5, "p1", {0, 2}, ProgramState::paused, true}})},
      {"snapshot_logs", encode_snapshot_view(32, {0, 1}, true)},
      {"view_logs", encode_view_snapshot(33, {{0, "prompt", 3, 3, {1, 2, 3}}})},
      {"create", encode_create_block(1, "thoughts")},
      {"free", encode_free_block(2, 3)},
      {"clear", encode_clear_block(3, 3)},
      {"merge", encode_merge_blocks(4, 0, 1, "ab")},
      {"fork", encode_fork_block(5, 0, 12, "head")},
      {"forward", encode_request(6, Request::forward(0, {1, 2, 3}, {0, 1}))},
      {"generate", encode_request(7, Request::generate(1, {0, 1}, {5}, {}, stop))},
      {"append", encode_request(8, Request::append(0, {9, 9, 9}))},
      {"probe", encode_request(9, Request::probe({0}, {4, 5}, {{6}, {7, 8}}))},
      {"register", encode_program(10, reg)},
      {"pause", encode_program(11, pause)},
      {"terminate_cancel", encode_program(22, end)},
      {"phase", encode_program(23, phase)},
      {"info", encode_block_info(12, 0, "log", 10, 8)},
      {"submitted", encode_submitted(13, 3)},
      {"snapshot", encode_snapshot_view(20, {0, 1, 2})},
      {"view", encode_view_snapshot(21, {{0, "prompt", 10, 10}, {1, "out", 4, 3}})},
      {"status", encode_program_status(14, 5, ProgramState::paused, 0, 100)},
      {"status_waiting", encode_program_status(24, 5, ProgramState::active, 12, 300, true, 2, 1, 40)},
      {"status_slots", encode_program_status(25, 6, ProgramState::active, 4, 60, false, 1, 1, 8, 2, 1)},
      {"heartbeat_slots", encode_heartbeat(26, "n1", 10, 64, 3, 4)},
      {"token", encode_event(15, token, "é")},
      {"probe_result", encode_event(16, probe, "")},
      {"finished", encode_event(17, done, "")},
      {"error", encode_error_envelope(18, make_error(Errc::not_found, "block 9 does not exist"))},
      {"hello", encode_hello_envelope(19, "node-a")},
  };
  for (const auto& [name, frame] : seeds) {
    const std::string path = std::string(argv[1]) + "/seed-" + name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(frame.data(), 1, frame.size(), f) != frame.size()) {
      std::fprintf(stderr, "frame_seeds: cannot write %s\n", path.c_str());
      return 1;
    }
    std::fclose(f);
  }
  return 0;
}
