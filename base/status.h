// The one error style of chorus: functions that can fail on input return Result<T> (a value or
// an Error) or Status (Result<void>). No exceptions cross a function declared in a header, nor
// a layer, actor or node boundary: where a library throws (yaml-cpp, the HTTP handlers'
// HttpError), the .cpp that calls it catches and converts at once (docs/architecture.md,
// "Errors"). assert only for programmer errors. Errors travel in frames with their Errc
// (schemas/common.fbs) and reach HTTP clients as a status and an OpenAI-style `code`.
//
//   CHORUS_TRY(expr)                 returns expr's Error from the enclosing function
//   CHORUS_ASSIGN_OR_RETURN(v, expr) declares v as expr's value, or returns its Error
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace chorus {

// Error classes. Stable: they travel in messages (schemas/common.fbs mirrors them).
enum class Errc : int {
  ok = 0,
  invalid_argument = 1,  // a caller passed something malformed
  io = 2,                // open/read/mmap failed
  bad_format = 3,        // a file or frame is malformed (what and where in the message)
  unsupported = 4,       // well-formed but not supported (version, type, architecture)
  not_found = 5,         // a named thing does not exist
  out_of_range = 6,      // a value or size exceeds a limit
  out_of_memory = 7,     // an allocation was refused
  internal = 8,          // a bug: an invariant did not hold
  withdrawn = 9,         // a waiting request taken back by its client before it ran (nothing of it ran)
};

const char* errc_name(Errc c);  // for people: "out of memory"
const char* errc_id(Errc c);    // for programs, as schemas/common.fbs spells it: "out_of_memory"

struct Error {
  Errc code = Errc::internal;
  std::string message;  // says what and where, e.g. "model.gguf: offset 24: ..."

  std::string to_string() const { return std::string(errc_name(code)) + ": " + message; }
};

inline Error make_error(Errc code, std::string message) {
  return Error{code, std::move(message)};
}

// A value or an Error. Deliberately small (std::expected is C++23).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  // On a temporary, hand the value out (so `for (auto& x : *f())` does not dangle).
  T operator*() && { return std::move(std::get<0>(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void> equivalent.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design
  static Status success() { return {}; }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }
  std::string message() const { return ok_ ? std::string() : error_.message; }  // "" when ok

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace chorus

#define CHORUS_CONCAT_INNER_(a, b) a##b
#define CHORUS_CONCAT_(a, b) CHORUS_CONCAT_INNER_(a, b)

// Returns the Error of a failed Status or Result from the enclosing function (which returns a
// Status or any Result).
#define CHORUS_TRY(expr)                                                            \
  do {                                                                              \
    if (auto&& chorus_try_ = (expr); !chorus_try_.ok()) return chorus_try_.error(); \
  } while (0)

// `CHORUS_ASSIGN_OR_RETURN(auto x, f());` declares x as f()'s value, or returns its Error.
#define CHORUS_ASSIGN_OR_RETURN(decl, expr) \
  CHORUS_ASSIGN_OR_RETURN_(CHORUS_CONCAT_(chorus_result_, __LINE__), decl, expr)
#define CHORUS_ASSIGN_OR_RETURN_(tmp, decl, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.error();              \
  decl = std::move(tmp).value()
