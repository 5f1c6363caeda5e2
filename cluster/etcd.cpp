#include "cluster/etcd.h"

#include <httplib.h>
#include <mutex>
#include <nlohmann/json.hpp>

namespace chorus::cluster {
namespace {

using json = nlohmann::json;

// etcd's gateway writes 64-bit numbers as strings (proto3 JSON); absent means 0.
int64_t number(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return it->is_number_integer() ? it->get<int64_t>() : 0;  // a float would not convert safely
}

// The key just past every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(prefix.back());
    if (c < 0xff) {
      ++c;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace

struct EtcdClient::Http {
  std::mutex mu;
  httplib::Client client;
  Http(const std::string& url, double timeout_s) : client(url) {
    const auto sec = static_cast<time_t>(timeout_s);
    const auto usec = static_cast<time_t>((timeout_s - static_cast<double>(sec)) * 1e6);
    client.set_connection_timeout(sec, usec);
    client.set_read_timeout(sec, usec);
    client.set_write_timeout(sec, usec);
  }
};

EtcdClient::EtcdClient(std::string url, std::unique_ptr<Http> http)
    : url_(std::move(url)), http_(std::move(http)) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::open(const std::string& url, double timeout_s) {
  if (url.rfind("http://", 0) != 0 || url.size() <= 7)
    return make_error(Errc::invalid_argument, "etcd URL `" + url + "`: expected http://HOST:PORT");
  if (!(timeout_s > 0)) return make_error(Errc::invalid_argument, "etcd timeout must be positive");
  std::string base = url;
  while (base.size() > 7 && base.back() == '/') base.pop_back();
  return std::unique_ptr<EtcdClient>(new EtcdClient(base, std::make_unique<Http>(base, timeout_s)));
}

namespace {

Result<json> call(httplib::Client& c, std::mutex& mu, const std::string& url, const std::string& path,
                  const json& body) {
  std::unique_lock lock(mu);
  httplib::Result res = c.Post(path, body.dump(), "application/json");
  lock.unlock();
  const std::string where = "etcd at " + url + ", " + path;
  if (!res) return make_error(Errc::io, where + ": " + httplib::to_string(res.error()));
  json j = json::parse(res->body, nullptr, false);
  if (res->status != 200) {
    std::string msg = j.is_object() && j.contains("message") && j["message"].is_string()
                          ? j["message"].get<std::string>()
                          : res->body.substr(0, 200);
    return make_error(Errc::io, where + ": HTTP " + std::to_string(res->status) + ": " + msg);
  }
  if (!j.is_object()) return make_error(Errc::bad_format, where + ": the answer is not a JSON object");
  if (j.contains("error")) {  // a streamed call (keepalive) reports errors in the body
    const json& e = j["error"];
    return make_error(
        Errc::io, where + ": " + (e.is_object() && e.contains("message") ? e["message"].dump() : e.dump()));
  }
  return j;
}

Result<EtcdKv> kv_of(const json& j) {
  EtcdKv kv;
  auto text = [&](const char* field) {
    auto it = j.find(field);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto key = base64_decode(text("key"));
  auto value = base64_decode(text("value"));
  if (!key || !value) return make_error(Errc::bad_format, "etcd answered a key or value that is not base64");
  kv.key = std::move(*key);
  kv.value = std::move(*value);
  kv.create_revision = number(j, "create_revision");
  kv.mod_revision = number(j, "mod_revision");
  kv.lease = number(j, "lease");
  return kv;
}

Result<std::vector<EtcdKv>> kvs_of(const json& j) {
  std::vector<EtcdKv> out;
  auto it = j.find("kvs");
  if (it == j.end() || !it->is_array()) return out;
  for (const json& k : *it) {
    CHORUS_ASSIGN_OR_RETURN(EtcdKv kv, kv_of(k));
    out.push_back(std::move(kv));
  }
  return out;
}

}  // namespace

Result<int64_t> EtcdClient::grant(int64_t ttl_s) {
  if (ttl_s <= 0) return make_error(Errc::invalid_argument, "a lease TTL must be at least 1 s");
  CHORUS_ASSIGN_OR_RETURN(
      json j, call(http_->client, http_->mu, url_, "/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}}));
  const int64_t id = number(j, "ID");
  if (id == 0) return make_error(Errc::io, "etcd at " + url_ + " granted no lease: " + j.dump());
  return id;
}

Result<int64_t> EtcdClient::keepalive(int64_t lease) {
  CHORUS_ASSIGN_OR_RETURN(
      json j, call(http_->client, http_->mu, url_, "/v3/lease/keepalive", {{"ID", std::to_string(lease)}}));
  const json& r = j.contains("result") ? j["result"] : j;
  return number(r, "TTL");
}

Status EtcdClient::revoke(int64_t lease) {
  auto j = call(http_->client, http_->mu, url_, "/v3/lease/revoke", {{"ID", std::to_string(lease)}});
  if (!j && j.error().message.find("not found") == std::string::npos) return j.error();
  return {};
}

Status EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  CHORUS_TRY(call(http_->client, http_->mu, url_, "/v3/kv/put", body));
  return {};
}

Result<std::optional<EtcdKv>> EtcdClient::get(const std::string& key) {
  CHORUS_ASSIGN_OR_RETURN(
      json j, call(http_->client, http_->mu, url_, "/v3/kv/range", {{"key", base64_encode(key)}}));
  CHORUS_ASSIGN_OR_RETURN(std::vector<EtcdKv> kvs, kvs_of(j));
  if (kvs.empty()) return std::optional<EtcdKv>();
  return std::optional<EtcdKv>(std::move(kvs.front()));
}

Result<std::vector<EtcdKv>> EtcdClient::list(const std::string& prefix) {
  CHORUS_ASSIGN_OR_RETURN(
      json j, call(http_->client, http_->mu, url_, "/v3/kv/range",
                   {{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}}));
  return kvs_of(j);
}

Status EtcdClient::erase(const std::string& key) {
  CHORUS_TRY(call(http_->client, http_->mu, url_, "/v3/kv/deleterange", {{"key", base64_encode(key)}}));
  return {};
}

Result<bool> EtcdClient::txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdPut>& puts) {
  json cmp = json::array(), ops = json::array();
  for (const EtcdCompare& c : compares)
    cmp.push_back({{"key", base64_encode(c.key)},
                   {"target", "MOD"},
                   {"result", "EQUAL"},
                   {"mod_revision", std::to_string(c.mod_revision)}});
  for (const EtcdPut& p : puts) {
    json put = {{"key", base64_encode(p.key)}, {"value", base64_encode(p.value)}};
    if (p.lease != 0) put["lease"] = std::to_string(p.lease);
    ops.push_back({{"request_put", put}});
  }
  CHORUS_ASSIGN_OR_RETURN(
      json j, call(http_->client, http_->mu, url_, "/v3/kv/txn", {{"compare", cmp}, {"success", ops}}));
  auto ok = j.find("succeeded");
  return ok != j.end() && ok->is_boolean() && ok->get<bool>();
}

std::string base64_encode(const std::string& bytes) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::optional<std::string> base64_decode(const std::string& text) {
  if (text.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      const int d = value(c);
      if (d < 0 || pad > 0) return std::nullopt;
      v = v << 6 | static_cast<uint32_t>(d);
    }
    if ((v & ((1u << (8 * pad)) - 1)) != 0) return std::nullopt;  // bits past the end: not canonical
    for (int k = 0; k < 3 - pad; ++k) out += static_cast<char>((v >> (16 - 8 * k)) & 0xff);
  }
  return out;
}

}  // namespace chorus::cluster
