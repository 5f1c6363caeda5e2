// The Anthropic Messages and OpenAI Responses requests read into the chat completion request they
// mean, as JSON for parse_chat_request (gateway/openai_request.h), which checks it: what
// /v1/messages and /v1/responses run. Both throw HttpError 400 naming what is refused.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace chorus {

// A request body as a JSON object, its keys in order; a 400 when it is not one.
nlohmann::ordered_json read_body(const std::string& body);

// A Messages body: system, text / tool_use / tool_result blocks, tools with input_schema,
// tool_choice, stop_sequences, temperature, top_p, metadata, stream, program_id (top_k, which chat
// does not take, is read by the caller).
nlohmann::ordered_json messages_as_chat(const nlohmann::ordered_json& body);

// A Responses body after `history` (the chat messages of its previous response's conversation):
// instructions, input text or items, function tools, tool_choice, text.format, max_output_tokens.
nlohmann::ordered_json responses_as_chat(const nlohmann::ordered_json& body,
                                         const nlohmann::ordered_json& history);

}  // namespace chorus
