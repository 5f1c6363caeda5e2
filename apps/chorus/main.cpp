// chorus: command-line entry point. Parses arguments (CLI11 lives only in this file) and
// dispatches to the subcommands in commands.h.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "apps/chorus/commands.h"
#include "engine/model_paths.h"

int main(int argc, char** argv) {
  CLI::App app{
      "chorus: a runtime for asynchronous LLM agents that share one model's KV cache.\n"
      "The default model is SmolLM2-135M-Instruct (Q4_1), fetched by scripts/setup.sh into\n"
      "$CHORUS_HOME/models (default ~/.cache/chorus/models); --model or $CHORUS_MODEL override it."};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")->capture_default_str();

  chorus::app::InfoArgs info;
  info.model = chorus::default_model_path();
  auto* info_cmd = app.add_subcommand("info", "Describe a GGUF model: architecture, sizes, tensor types, special tokens");
  info_cmd->add_option("--model,-m", info.model, "GGUF file")->capture_default_str();
  info_cmd->add_flag("--metadata", info.metadata, "Print every metadata key and value");
  info_cmd->add_flag("--tensors", info.tensors, "List every tensor: name, type, shape, size, offset");
  info_cmd->add_flag("--check-runtime", info.check_runtime, "Also self-test the actor runtime (CAF + FlatBuffers)");

  chorus::app::TokenizeArgs tok;
  tok.model = chorus::default_model_path();
  auto* tok_cmd = app.add_subcommand("tokenize", "Text to token ids (or ids to text with --decode)");
  tok_cmd->add_option("--model,-m", tok.model, "GGUF file")->capture_default_str();
  tok_cmd->add_option("text", tok.text, "Text to tokenize");
  tok_cmd->add_option("--decode,-d", tok.decode_ids, "Token ids to turn back into text, e.g. \"1, 9159, 28\"");
  tok_cmd->add_flag("!--no-special", tok.parse_special, "Treat <|im_start|> and other control-token text as plain text");
  tok_cmd->add_flag("--add-special", tok.add_special, "Add BOS/EOS if the model asks for them");
  tok_cmd->add_flag("--pieces,-p", tok.pieces, "Print one line per token: id and the text it stands for");
  tok_cmd->add_flag("--chat", tok.chat, "Wrap the text as a user turn of the chat template");

  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));

  if (*info_cmd) return chorus::app::run_info(info);
  if (*tok_cmd) {
    if (tok.text.empty() && tok.decode_ids.empty() && tok_cmd->count("text") == 0) {
      std::fprintf(stderr, "chorus tokenize: give TEXT to tokenize or --decode IDS\n");
      return 2;
    }
    return chorus::app::run_tokenize(tok);
  }
  return 0;
}
