// ZeroMQ CURVE for chorus's sockets: key pairs and their files, the allowlist of peers a server
// accepts, and the ZAP handler that enforces it (RFC 27; libzmq asks it at every CURVE handshake).
//
// Files (written by `chorus keygen NAME`):
//  - NAME.key, mode 0600: `public <z85>` and `secret <z85>` lines. Refused when group or others
//    may read it, as ssh refuses a private key.
//  - NAME.pub: one line `<z85> NAME`. An allowlist is any number of such lines (`#` comments), so
//    `cat a.pub b.pub > allowed` makes one.
// Keys are Z85, 40 characters for 32 bytes. A line that starts with `#` is a comment (`#` may be
// inside a key, never its first character); comments elsewhere on a line are not.
//
// A CURVE server socket with no ZAP handler would accept every client that has *some* key pair,
// so a server here always has one: CurveGate binds the context's ZAP endpoint and answers 200 only
// for the allowed keys of its domain. Refusals are logged (rate-limited: a refused peer reconnects
// every few hundred ms) and counted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace chorus {

struct CurveKeys {
  std::string public_key;  // z85
  std::string secret_key;  // z85; "" for a peer's public key only
};

struct AllowedKey {
  std::string key;   // z85
  std::string name;  // for messages ("" : the key's first 8 characters)
};

Result<CurveKeys> make_curve_keys();
// Writes base + ".key" (0600) and base + ".pub". Refuses to replace existing files unless asked.
Status write_curve_keys(const CurveKeys& keys, const std::string& base, bool overwrite);
Result<CurveKeys> read_curve_secret(const std::string& path);
// A public key: a .pub file's path, or the 40 z85 characters themselves.
Result<std::string> read_curve_public(const std::string& path_or_key);
// Every allowed key of the files (each an allowlist or a .pub file); errors name file and line.
Result<std::vector<AllowedKey>> read_allowed_keys(const std::vector<std::string>& paths);
bool valid_z85_key(const std::string& key);

// True for endpoints only this machine reaches: tcp on 127.0.0.0/8, localhost or [::1]; ipc://
// and inproc://. A wildcard or any other address is not.
bool is_loopback_endpoint(const std::string& endpoint);

// Makes `sock` a CURVE server of `domain` (bind it afterwards) / a CURVE client of a server whose
// public key is `server_key` (connect afterwards). Errors: a malformed key.
Status curve_server(zmq::socket_t& sock, const CurveKeys& keys, const std::string& domain);
Status curve_client(zmq::socket_t& sock, const CurveKeys& keys, const std::string& server_key);

// The ZAP handler of one ZeroMQ context: CURVE clients of sockets whose domain is `domain` are
// accepted when their key is allowed; every other CURVE handshake in the context is refused, and
// NULL-mechanism sockets (plain ones, which libzmq does not send to ZAP) are not affected. One per
// context: a second fails with Errc::io. Stops (and unbinds) when destroyed.
class CurveGate {
 public:
  static Result<std::unique_ptr<CurveGate>> start(zmq::context_t& context, std::string domain,
                                                  std::vector<AllowedKey> allowed, std::string what);
  ~CurveGate();
  CurveGate(const CurveGate&) = delete;
  CurveGate& operator=(const CurveGate&) = delete;

  int64_t accepted() const;  // handshakes let through
  int64_t refused() const;   // handshakes refused (unknown key, another domain)

 private:
  struct Impl;
  explicit CurveGate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
