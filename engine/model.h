// A loaded model: the mapped GGUF file and everything derived from it (config, weight views,
// tokenizer, chat template). Immutable after load; share it between runners and threads.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "engine/chat_template.h"
#include "engine/gguf.h"
#include "engine/model_config.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"

namespace chorus {

struct Model {
  GgufFile gguf;  // owns the mapping every view below points into
  ModelConfig config;
  Weights weights;
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat;  // absent when the file's template is not ChatML

  // Errors name the file and what is wrong (see GgufFile, ModelConfig, Weights, Tokenizer).
  static Result<std::unique_ptr<Model>> load(const std::string& path);
};

}  // namespace chorus
