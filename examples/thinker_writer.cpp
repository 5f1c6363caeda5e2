// The AsyncLLM paper's thinker-writer agent (its Figure 2), written in C++: a thinker reasons
// into its block; a writer, seeing the thinker's block live through its view, writes one short
// line after each line the thinker finishes — while the thinker goes on. The same program as
// topologies/thinker_writer.yaml, built with topology::Builder and run by Program::start.
//   ./build/examples/thinker_writer "Why is the sky blue?"
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "actors/program.h"
#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/model/model_paths.h"
#include "topology/builder.h"

using namespace chorus;

int main(int argc, char** argv) {
  const std::string question = argc > 1 ? argv[1] : "Why is the sky blue?";
  auto model = Model::load(default_model_path());
  auto device = CpuDevice::create();
  if (!model || !device) {
    std::fprintf(stderr, "%s\n", (!model ? model.error() : device.error()).to_string().c_str());
    return 1;
  }

  // Three blocks: the question (a chat turn), the thinker's thoughts, the writer's notes.
  topology::Builder b("thinker_writer");
  b.topology().budget_seconds = 120;
  b.block("prompt", question + " Explain it in three short paragraphs.").chat = "user";
  b.block("thoughts");
  b.block("notes");
  topology::Actor& thinker = b.thinker("thinker", {"prompt", "thoughts"}, "thoughts");
  thinker.prefill = "<|im_start|>assistant\n";
  thinker.max_tokens = 256;
  thinker.emits = {{"\n", "paragraph"}};  // a line of reasoning is done
  thinker.to = {"thoughts_out"};
  topology::Actor& writer = b.writer("writer", {"prompt", "thoughts", "notes"}, "notes", {"paragraph"});
  writer.prefill =
      "<|im_start|>user\nSummarize your last paragraph in a few words of your own.<|im_end|>\n"
      "<|im_start|>assistant\n";
  writer.max_tokens = 32;
  writer.sampling.repeat_penalty = 1.3f;  // no loops within a line
  writer.sampling.repeat_last_n = 64;
  writer.fresh = true;  // each line from the thoughts alone, not from its last line
  writer.stop = {"\n", "<|im_end|>"};
  writer.to = {"notes_out"};
  b.sink("thoughts_out", topology::SinkKind::callback);
  b.sink("notes_out", topology::SinkKind::callback);
  auto topology = b.build();
  if (!topology) {
    std::fprintf(stderr, "%s\n", topology.error().to_string().c_str());
    return 1;
  }

  std::mutex out;  // the sinks are called from the roles' threads
  const auto t0 = std::chrono::steady_clock::now();
  auto stamp = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  ProgramHooks hooks;
  hooks.sink = [&](const std::string& sink, const std::string& text) {
    std::lock_guard<std::mutex> l(out);
    if (sink == "thoughts_out")
      std::printf("%s", text.c_str());
    else
      std::printf("\n    [writer %.2fs] %s\n", stamp(), text.c_str());
    std::fflush(stdout);
  };
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  std::printf("[thinker]\n");
  auto program = Program::start(sys, *topology, **model, **device, hooks);
  if (!program) {
    std::fprintf(stderr, "%s\n", program.error().to_string().c_str());
    return 1;
  }
  const ProgramReport report = (*program)->wait();
  std::printf("\n[%s in %.2fs]\n", report.ended_by.c_str(), stamp());
  return report.ok() ? 0 : 1;
}
