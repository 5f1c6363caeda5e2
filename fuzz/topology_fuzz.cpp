// libFuzzer target for the topology reader: any byte string must load or fail with an Error
// naming a place, never crash, hang or blow up (aliases, nesting, huge scalars); run under
// ASan+UBSan. Seeds: the shipped topologies; dictionary: fuzz/topology.dict.
#include <cstddef>
#include <cstdint>
#include <string>

#include "topology/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
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
