// API keys for the HTTP gateway: `Authorization: Bearer KEY`, checked without a timing leak.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace chorus {

// The key of an `Authorization` header value ("Bearer KEY", the scheme in any case, spaces
// around), as a view into `header` (keep it alive); nothing when it is not a bearer token.
std::optional<std::string_view> bearer_token(std::string_view header);

// Whether `presented` is one of `keys`. Every key is compared, each byte by byte to the end of
// the longer of the two, with no early exit: the time does not depend on where they differ.
bool key_allowed(std::string_view presented, const std::vector<std::string>& keys);

// Keys from a file: one per line, surrounding spaces dropped, blank lines and lines starting
// with '#' skipped. Errors: Errc::io (cannot be read), Errc::bad_format (no key in it, or a key
// with spaces or control characters inside, named by its line).
Result<std::vector<std::string>> read_key_file(const std::string& path);

}  // namespace chorus
