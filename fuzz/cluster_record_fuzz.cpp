// libFuzzer target for what a cluster member reads from etcd: node records, model identities and
// the base64 of etcd's JSON gateway. Any bytes must parse or fail with an Error, never crash; a
// parsed record survives a round trip; base64 decodes what it encodes, and re-encodes what it
// decodes to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cluster/etcd.h"
#include "cluster/membership.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (auto r = chorus::cluster::NodeRecord::from_json(text); r.ok()) {
    auto again = chorus::cluster::NodeRecord::from_json(r->to_json());
    if (!again.ok() || again->name != r->name || again->endpoint != r->endpoint ||
        again->model.fingerprint != r->model.fingerprint)
      std::abort();
  }
  if (auto m = chorus::cluster::ModelIdentity::from_json(text); m.ok())
    if (!chorus::cluster::ModelIdentity::from_json(m->to_json())->same_model(*m)) std::abort();
  if (*chorus::cluster::base64_decode(chorus::cluster::base64_encode(text)) != text) std::abort();
  if (auto d = chorus::cluster::base64_decode(text))
    if (chorus::cluster::base64_encode(*d) != text) std::abort();
  return 0;
}
