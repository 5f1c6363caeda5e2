// Example: load the default model's tokenizer, build a ChatML prompt, tokenize it, and stream
// the ids back to text with the incremental decoder (as a generator would).
//   ./build/examples/tokenize_chat "What is the capital of France?"
#include <cstdio>

#include "engine/model/gguf.h"
#include "engine/model/model_paths.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  const std::string question = argc > 1 ? argv[1] : "What is the capital of France?";
  auto gguf = chorus::GgufFile::open(chorus::default_model_path());
  if (!gguf) {
    std::fprintf(stderr, "%s\n", gguf.error().to_string().c_str());
    return 1;
  }
  auto tokenizer = chorus::Tokenizer::from_gguf(*gguf);
  if (!tokenizer) {
    std::fprintf(stderr, "%s\n", tokenizer.error().to_string().c_str());
    return 1;
  }
  auto tmpl = chorus::ChatTemplate::from_gguf(*gguf, *tokenizer);  // the file's own Jinja template
  auto rendered = tmpl ? tmpl->apply({{"user", question}}) : chorus::Result<std::string>(tmpl.error());
  if (!rendered) {
    std::fprintf(stderr, "%s\n", rendered.error().to_string().c_str());
    return 1;
  }
  const std::string prompt = *rendered;
  const auto ids = tokenizer->encode(prompt, {.parse_special = true});
  std::printf("%zu tokens:", ids.size());
  for (auto id : ids) std::printf(" %d", id);
  std::printf("\n");

  chorus::IncrementalDecoder stream(*tokenizer);
  for (auto id : ids) std::fputs(stream.push(id).c_str(), stdout);
  std::fputs(stream.flush().c_str(), stdout);
  return 0;
}
