// What a template can call besides its own macros: the methods of strings and dicts that chat
// templates use (content.strip(), message.get('x'), d.items() ...) and the globals range,
// namespace, dict, raise_exception and strftime_now. Filters and tests: jinja_ast.h.
// Lists have no methods: transformers renders in jinja2's immutable sandbox, where
// list.append and dict.update are refused; chorus refuses them too.
#pragma once

#include <string>

#include "engine/template/jinja_value.h"

namespace chorus::jinja {

// obj.name: a bound method, or else obj's item `name` (jinja2 tries the attribute first), or
// an Undefined that says what was missing. Throws on an Undefined `obj`.
Value get_attr(const Value& obj, const std::string& name);

// obj[key]: an item (negative list indices count from the end), or else a method by that name,
// or else an Undefined. Throws on an Undefined `obj`.
Value get_item(const Value& obj, const Value& key);

// obj[start:stop:step] for lists and strings (a none part: left out).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The globals, in an object whose items a template's own names shadow.
Object global_functions();

}  // namespace chorus::jinja
