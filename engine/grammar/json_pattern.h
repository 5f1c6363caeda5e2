// A JSON string matching a JSON Schema `pattern` (ECMA-262 as JSON Schema reads it: a match
// anywhere unless anchored), as grammar rules: a subset — literals, `.` (printable ASCII), classes
// (ranges, \d \w \s and their negations; a negated class writes printable ASCII), groups with
// `|` (`(?:` too), the quantifiers * + ? {m} {m,} {m,n}, `^` at the start and `$` at the end. What
// it writes is a subset of what matches: `.` and negations write no escapes, \s writes a space.
#pragma once

#include <cstdint>
#include <string>

#include "engine/grammar/grammar.h"

namespace chorus {

// The rule of the whole JSON string (its quotes included), built in `b`; `json_char` is the rule
// of one JSON string character (what an unanchored side repeats). What the subset does not hold
// sets `*error` (naming it) and returns -1.
int32_t pattern_grammar(GrammarBuilder& b, int32_t json_char, const std::string& re, const std::string& at,
                        std::string* error);

}  // namespace chorus
