// A small etcd v3 client over etcd's JSON gateway (`POST /v3/...`): the leases, keys and
// transactions that cluster membership and leader election need, nothing more.
//
// Why the JSON gateway and not gRPC: Debian ships no C++ etcd client, and etcd's gRPC API through
// libgrpc++ would bring a second RPC stack and code generation into the build for six calls; the
// gateway is part of every etcd 3.4 server, speaks the same messages as JSON (keys and values in
// base64, 64-bit numbers as strings), and cpp-httplib and nlohmann-json are dependencies already.
// Watches are not used: members poll (the cluster's key count is small), which also survives an
// etcd restart without re-establishing streams.
//
// Thread-safety: an EtcdClient may be used from several threads (one connection at a time,
// under a mutex). Every call has the timeout given at construction; an unreachable or failing
// etcd is an Errc::io error naming the URL and the call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus::cluster {

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // the cluster revision that created it (an epoch: it grows)
  int64_t mod_revision = 0;     // ... that last changed it
  int64_t lease = 0;            // the lease it is attached to (0: none)
};

// One condition of a transaction: the key's mod_revision equals `mod_revision` (0: the key does
// not exist).
struct EtcdCompare {
  std::string key;
  int64_t mod_revision = 0;
};

struct EtcdPut {
  std::string key;
  std::string value;
  int64_t lease = 0;
};

class EtcdClient {
 public:
  // `url`: http://HOST:PORT (one endpoint). Nothing is contacted until the first call.
  static Result<std::unique_ptr<EtcdClient>> open(const std::string& url, double timeout_s = 2.0);
  ~EtcdClient();

  const std::string& url() const { return url_; }

  // Leases. keepalive() returns the lease's remaining TTL in seconds; 0 when the lease has expired
  // or was revoked (etcd forgets it: a holder must take a new one).
  Result<int64_t> grant(int64_t ttl_s);
  Result<int64_t> keepalive(int64_t lease);
  Status revoke(int64_t lease);

  Status put(const std::string& key, const std::string& value, int64_t lease = 0);
  Result<std::optional<EtcdKv>> get(const std::string& key);
  Result<std::vector<EtcdKv>> list(const std::string& prefix);  // every key under prefix, in key order
  Status erase(const std::string& key);

  // If every comparison holds, does the puts and returns true; else changes nothing and returns
  // false. Atomic: etcd's Txn.
  Result<bool> txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdPut>& puts);
  // Puts `key` only where it does not exist yet (a txn on mod_revision 0).
  Result<bool> create(const std::string& key, const std::string& value, int64_t lease = 0) {
    return txn({{key, 0}}, {{key, value, lease}});
  }

 private:
  struct Http;
  EtcdClient(std::string url, std::unique_ptr<Http> http);
  std::string url_;
  std::unique_ptr<Http> http_;
};

// Base64 (RFC 4648, with padding), as etcd's JSON gateway writes keys and values. decode: nullopt
// for text that is not canonical base64 (bad characters or length, misplaced padding, bits set
// past the last byte), so a decoded text re-encodes to itself.
std::string base64_encode(const std::string& bytes);
std::optional<std::string> base64_decode(const std::string& text);

}  // namespace chorus::cluster
