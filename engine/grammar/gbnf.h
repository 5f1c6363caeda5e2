// GBNF, llama.cpp's grammar notation, compiled to a byte grammar (grammar.h): what a constrained
// generation writes when a request gives a grammar instead of a JSON Schema.
//
//   root   ::= answer "." | "no"          # a rule per definition; `root` is where output starts
//   answer ::= [A-Z] [a-z]* ("-" [a-z]+)?
//
// Elements: "literal" (escapes \n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH), [character
// class] with ranges and [^negation], `.` (any character), a rule's name, ( group ); each may be
// followed by *, +, ?, {m}, {m,}, {m,n}. Sequences are juxtaposition, alternatives `|`; `#` starts
// a comment to the end of the line. Characters are Unicode code points, matched as their UTF-8
// bytes (a class or `.` stands for every code point it covers, surrogates excluded). A rule's
// body may run over several lines: it ends where the next `name ::=` begins.
//
// What the byte grammar's build checks holds here too (grammar.h): an undefined rule, a rule
// that derives nothing finite, left recursion — each an error naming the rule — and parse errors
// name the line and column.
#pragma once

#include <string_view>

#include "base/status.h"
#include "engine/grammar/grammar.h"

namespace chorus {

// Limits: grammars of at most this many bytes, repetitions {m,n} of at most this many copies.
inline constexpr size_t kMaxGbnfBytes = 64 * 1024;
inline constexpr int64_t kMaxGbnfRepeat = 1000;

// Errc::invalid_argument with "GBNF line L column C: ..." for text that does not parse, and the
// build's errors (grammar.h) for a grammar that cannot constrain anything.
Result<Grammar> gbnf_grammar(std::string_view text);

}  // namespace chorus
