#include "base/status.h"

namespace chorus {

const char* errc_name(Errc c) {
  switch (c) {
    case Errc::ok: return "ok";
    case Errc::invalid_argument: return "invalid argument";
    case Errc::io: return "I/O error";
    case Errc::bad_format: return "bad format";
    case Errc::unsupported: return "unsupported";
    case Errc::not_found: return "not found";
    case Errc::out_of_range: return "out of range";
    case Errc::out_of_memory: return "out of memory";
    case Errc::internal: return "internal error";
    case Errc::withdrawn: return "withdrawn";
  }
  return "unknown error";
}

const char* errc_id(Errc c) {
  switch (c) {
    case Errc::ok: return "ok";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::io: return "io";
    case Errc::bad_format: return "bad_format";
    case Errc::unsupported: return "unsupported";
    case Errc::not_found: return "not_found";
    case Errc::out_of_range: return "out_of_range";
    case Errc::out_of_memory: return "out_of_memory";
    case Errc::internal: return "internal";
    case Errc::withdrawn: return "withdrawn";
  }
  return "internal";
}

}  // namespace chorus
