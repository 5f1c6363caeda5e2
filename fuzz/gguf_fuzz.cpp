// libFuzzer target for the GGUF loader, the model config and the weight loader: any byte string
// must parse or fail with an Error,
// never crash, hang or read outside the buffer (run under ASan+UBSan).
#include <cstddef>
#include <cstdint>

#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = chorus::GgufFile::parse({data, size}, "fuzz.gguf");
  if (!g.ok()) return 0;
  // Touch what a user of a parsed file would touch.
  for (const auto& kv : g->metadata()) (void)kv.value.to_string();
  for (const auto& t : g->tensors()) {
    if (t.n_bytes > 0) (void)t.data[t.n_bytes - 1];
  }
  auto tok = chorus::Tokenizer::from_gguf(*g);
  if (tok.ok()) (void)tok->encode("Hello, world! 123 <|im_start|>", {.parse_special = true});
  // The model's hyper-parameters (hybrid layer lists, rope sections, ...) and weight shapes.
  auto config = chorus::ModelConfig::from_gguf(*g);
  if (config.ok()) (void)chorus::Weights::from_gguf(*g, *config);
  return 0;
}
