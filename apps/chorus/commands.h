// The `chorus` subcommands. main.cpp parses the command line (CLI11 stays in that one TU)
// and calls these; each returns the process exit code and prints its own errors.
#pragma once

#include <string>

namespace chorus::app {

struct InfoArgs {
  std::string model;
  bool metadata = false;       // print every metadata key/value
  bool tensors = false;        // list every tensor
  bool check_runtime = false;  // run the actor-runtime self-test
};
int run_info(const InfoArgs& args);

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string decode_ids;      // "1, 2, 3": decode instead of encode
  bool parse_special = true;   // match <|im_start|> and other control tokens in the text
  bool add_special = false;    // add BOS/EOS as the model asks
  bool pieces = false;         // print one line per token: id and its text
  bool chat = false;           // wrap TEXT as a user turn of the model's chat template
};
int run_tokenize(const TokenizeArgs& args);

}  // namespace chorus::app
