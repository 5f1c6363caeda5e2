#include "engine/model/model.h"

namespace chorus {

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  auto gguf = GgufFile::open(path);
  if (!gguf) return gguf.error();
  auto config = ModelConfig::from_gguf(*gguf);
  if (!config) return config.error();
  auto weights = Weights::from_gguf(*gguf, *config);
  if (!weights) return weights.error();
  auto tokenizer = Tokenizer::from_gguf(*gguf);
  if (!tokenizer) return tokenizer.error();
  auto chat = ChatTemplate::from_gguf(*gguf, *tokenizer);
  // Weights hold views into the mapping, which moves with the GgufFile (its bytes do not).
  auto m = std::unique_ptr<Model>(new Model{
      std::move(*gguf), std::move(*config), std::move(*weights), std::move(*tokenizer), std::nullopt, {}});
  if (chat)
    m->chat = std::move(*chat);
  else
    m->chat_error = chat.error();
  return m;
}

}  // namespace chorus
