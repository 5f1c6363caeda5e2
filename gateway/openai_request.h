// The OpenAI chat-completions request as the gateway (gateway/gateway.h) accepts it, validated,
// and OpenAI-style errors: what a client sent, read into chorus's terms.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/forward/sampler.h"
#include "engine/tokenizer/chat_template.h"
#include "gateway/tool_calls.h"

namespace chorus {

// An HTTP error to answer with: the status and an OpenAI-style JSON body.
struct HttpError {
  int status;
  std::string body;
};

// {"error": {"message", "type", "param", "code"}}; param and code are null when empty.
std::string error_body(const std::string& message, const std::string& type, const std::string& param = "",
                       const std::string& code = "");
// An engine or batcher error as an HTTP client gets it: out_of_memory (the KV pool) is 503 with
// code "kv_cache_full" (the client may retry); not_found 404; the other caller errors 400;
// io, bad_format and internal 500. The code is the Errc's id (errc_id) where no OpenAI one fits.
HttpError http_error(const Error& e);
// JSON as text for a client: bytes that are not UTF-8 (a message quoting a malformed body, a
// file name) become U+FFFD instead of making the serializer throw.
std::string json_text(const nlohmann::json& j);
// Throws HttpError 400 (invalid_request_error) naming `param`.
[[noreturn]] void bad_request(const std::string& message, const std::string& param = "");

// The most choices one request may ask for (`n`).
inline constexpr int kMaxChoices = 16;

// What one chat request — or completion request (`completion`) — asks for, validated.
struct ChatRequest {
  std::vector<ChatMessage> messages;
  ChatTools tools;
  int max_tokens = 0;
  int n = 1;                // choices: forks of one prompt block
  SamplingParams sampling;  // with logprobs (-1: none asked for), penalties, logit_bias, seed
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  std::string program_id;

  // /v1/completions: the prompt as it is given, not rendered by a chat template: text (the
  // vocabulary's BOS added where it says so) or token ids; `echo` puts it before each choice.
  bool completion = false;
  std::string prompt_text;
  std::vector<TokenId> prompt_ids;  // when the prompt was token ids
  bool echo = false;
};

// Reads a /v1/chat/completions body. Throws HttpError: 400 for malformed JSON and bad fields
// (naming the param), 404 for a model other than `model_name` (or "default"). `n_vocab` > 0:
// logit_bias keys must be token ids below it.
ChatRequest parse_chat_request(const std::string& body, const std::string& model_name, int default_max_tokens,
                               int max_tokens_limit, int n_vocab = 0);
// Reads a /v1/completions body, the same way (max_tokens defaults to 16, as OpenAI's); a prompt
// of token ids must have ids below `n_vocab` (when > 0).
ChatRequest parse_completion_request(const std::string& body, const std::string& model_name,
                                     int max_tokens_limit, int n_vocab = 0);

}  // namespace chorus
