// JSON Schema -> grammar (grammar.h) of the JSON texts the schema accepts, so that a constrained
// generation can only write valid instances. The subset (docs/structured-output.md lists it):
//
//   type (one or a list), enum, const, anyOf, allOf of one schema, $ref into the same document
//   ("#", "#/$defs/..", "#/definitions/..", any JSON pointer), properties, required,
//   additionalProperties (false, true or absent: only the listed properties are written),
//   items, minItems, maxItems, minLength, maxLength; annotations (title, description, default,
//   examples, $schema, $id, $comment, $defs, definitions, deprecated, readOnly, writeOnly) are
//   read past. `true` / `{}` is any JSON value.
//
// Properties are written in their order in `properties`, each required one always, each other
// one optionally. Between tokens at most 16 whitespace characters, so a model cannot stall in
// whitespace. Numbers: integers of at most 16 digits; numbers with at most 16 fraction digits
// and a two-digit exponent (never infinite once parsed).
//
// Any other keyword (pattern, format, minimum, oneOf, uniqueItems, ...) is refused: an error
// naming the keyword and where it is, never a constraint silently dropped. An unsatisfiable
// schema (false, an empty enum, a required property that is not listed, a $ref cycle that never
// ends) is an error too. Errc::invalid_argument for both.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "engine/grammar/grammar.h"

namespace chorus {

Result<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
Grammar json_object_grammar();

// Free text, then at most one tool call, spelled as Hermes/Qwen templates write one back:
//   <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>
// `tools` is a list of {"name": ..., "parameters": SCHEMA}: NAME is one of the names, ARGS an
// instance of that tool's parameters (any JSON object when it has none; each schema's $refs are
// its own). The free text may hold any byte but '<', which only a call opens; the text is whole
// at any point of it and after the call.
//
// `tools` may also be {"tools": [...], "required": true, "parallel": P}: then calls only, no
// text (HTTP tool_choice "required" or a named function): one call, or with P one to 8 calls
// apart by a newline.
Result<Grammar> tool_call_grammar(const nlohmann::ordered_json& tools);

}  // namespace chorus
