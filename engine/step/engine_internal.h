// The engine's request and plan records (engine/step/engine.h), shared by its source files:
// engine.cpp (submit and the step), engine_trace.cpp. Internal to the engine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/step/engine.h"
#include "engine/tokenizer/detokenizer.h"

namespace chorus {

struct Engine::Active {
  RequestId id = 0;
  Request req;
  BlockId target = -1;    // the block written (the scratch block for a probe)
  size_t fed = 0;         // req.tokens already run
  bool decoding = false;  // generate: prefill done, sampling
  bool draining = false;  // generate: stopped, the last sampled token still to run
  FinishReason drain_reason = FinishReason::completed;
  TokenId pending = -1;  // generate: sampled, to run next step
  int generated = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<IncrementalDecoder> detok;
  std::string text;  // generated text, for stop strings
  bool done = false;
  bool started = false;  // forward/generate: took over the block's uncached log tokens
};

struct Engine::Planned {
  Active* a;
  std::vector<TokenId> tokens;
  bool logits;
};

}  // namespace chorus
