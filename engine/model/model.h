// A loaded model: the mapped GGUF file and everything derived from it (config, weight views,
// tokenizer, chat template). Immutable after load; share it between runners and threads.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus {

struct Model {
  GgufFile gguf;  // owns the mapping every view below points into
  ModelConfig config;
  Weights weights;
  Tokenizer tokenizer;
  // The file's chat template (ChatML where it has none); absent when chorus cannot parse it,
  // and then chat_error says why (commands that render chats report it and stop).
  std::optional<ChatTemplate> chat;
  Error chat_error;

  // Errors name the file and what is wrong (see GgufFile, ModelConfig, Weights, Tokenizer).
  static Result<std::unique_ptr<Model>> load(const std::string& path);
};

}  // namespace chorus
