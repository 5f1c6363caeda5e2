// libFuzzer target for the topology reader: any byte string must load or fail with an Error
// naming a place, never crash, hang or blow up (aliases, nesting, huge scalars); run under
// ASan+UBSan. The same bytes are also a patch (topology::patch) of a fixed program, with the same
// rules. Seeds: the shipped topologies; dictionary: fuzz/topology.dict.
#include <cstddef>
#include <cstdint>
#include <string>

#include "topology/topology.h"

namespace {

// The program a patch is tried on: blocks, a thinker with edit_program, a writer, a probe, a sink.
const chorus::topology::Topology& program() {
  static const chorus::topology::Topology t = *chorus::topology::load_string(R"(
params: {topic: tides}
blocks: {task: {text: "Explain {{topic}}."}, plan: null, out: null}
actors:
  planner: {kind: thinker, view: [task, plan], writes: plan, tools: [edit_program], emit: [{at: "\n", event: step}]}
  writer: {kind: writer, view: [task, plan, out], writes: out, on: [step], to: [screen]}
  watch: {kind: probe, view: [plan], question: " Done?", candidates: [" Yes", " No"], watch: plan, fires: finished}
  screen: {kind: sink, to: stdout}
finish: [finished]
)",
                                                                             "program.yaml");
  return t;
}

void try_patch(const std::string& text) {
  auto p = chorus::topology::patch(program(), text, "patch", {.caller = "planner"});
  if (!p.ok()) {
    if (p.error().message.rfind("patch", 0) != 0) __builtin_trap();
    return;
  }
  for (const auto& a : p->topology.actors)
    for (const auto& b : a.view)
      if (!p->topology.block(b)) __builtin_trap();
  if (!chorus::topology::patch(p->topology, "{}", "again").ok())
    __builtin_trap();  // a patched program is a program
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try_patch(text);
  chorus::topology::LoadOptions check;
  check.require_params = false;  // as chorus check
  auto t = chorus::topology::load_string(text, "fuzz.yaml", check);
  if (!t.ok()) {
    if (t.error().message.rfind("fuzz.yaml", 0) != 0 && t.error().message.rfind("--set", 0) != 0)
      __builtin_trap();
    return 0;
  }
  (void)t->emitters();  // what the runner resolves next
  for (const auto& a : t->actors)
    for (const auto& b : a.view)
      if (!t->block(b)) __builtin_trap();  // a loaded topology has every name resolved
  return 0;
}
