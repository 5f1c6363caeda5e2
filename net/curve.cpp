#include "net/curve.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "base/text.h"

namespace chorus {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // fixed by RFC 27

// The lines of a file without comments and blanks, each with its number.
Result<std::vector<std::pair<int, std::string>>> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(Errc::io, "cannot read " + path + ": " + std::strerror(errno));
  std::vector<std::pair<int, std::string>> lines;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = std::string(trim(line));
    // A comment starts with `#`. `#` is a Z85 digit too, but never the first of a key (it is 84,
    // and a group of five digits starting so would exceed 32 bits), so a key line never does.
    if (line.empty() || line[0] == '#') continue;
    lines.emplace_back(n, line);
  }
  return lines;
}

std::string where(const std::string& path, int line) {
  return path + ":" + std::to_string(line) + ": ";
}

Status write_file(const std::string& path, const std::string& text, mode_t mode, bool overwrite) {
  const int flags = O_WRONLY | O_CREAT | (overwrite ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0)
    return make_error(Errc::io, "cannot write " + path + ": " + std::strerror(errno) +
                                    (errno == EEXIST ? " (pass --force to replace it)" : ""));
  const bool ok =
      ::fchmod(fd, mode) == 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  if (!ok) return make_error(Errc::io, "cannot write " + path + ": " + std::strerror(err));
  return {};
}

std::string z85(const uint8_t* key32) {
  char out[41] = {};
  zmq_z85_encode(out, key32, 32);
  return out;
}

Status set_key(zmq::socket_t& sock, int option, const std::string& key, const char* what) {
  if (!valid_z85_key(key)) return make_error(Errc::invalid_argument, std::string("malformed CURVE ") + what);
  if (zmq_setsockopt(sock.handle(), option, key.data(), key.size()) != 0)
    return make_error(Errc::internal,
                      std::string("cannot set the CURVE ") + what + ": " + zmq_strerror(zmq_errno()));
  return {};
}

}  // namespace

bool valid_z85_key(const std::string& key) {
  uint8_t bytes[32];
  return key.size() == 40 && zmq_z85_decode(bytes, key.c_str()) != nullptr;
}

Result<CurveKeys> make_curve_keys() {
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    return make_error(Errc::unsupported,
                      std::string("this libzmq cannot make CURVE keys: ") + zmq_strerror(zmq_errno()));
  return CurveKeys{pub, sec};
}

Status write_curve_keys(const CurveKeys& keys, const std::string& base, bool overwrite) {
  const std::string name = base.substr(base.find_last_of('/') + 1);
  const std::string secret = "# chorus CURVE key pair `" + name +
                             "`: keep this file private (mode 0600)\npublic " + keys.public_key +
                             "\nsecret " + keys.secret_key + "\n";
  const std::string pub = "# chorus CURVE public key `" + name +
                          "`: give it to the peers that must accept it\n" + keys.public_key + " " + name +
                          "\n";
  if (auto s = write_file(base + ".key", secret, 0600, overwrite); !s) return s;
  return write_file(base + ".pub", pub, 0644, overwrite);
}

Result<CurveKeys> read_curve_secret(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error(Errc::io, "cannot read " + path + ": " + std::strerror(errno));
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return make_error(Errc::invalid_argument, "the key file " + path + " may be read by others (mode " +
                                                  mode + "): chmod 600 " + path);
  }
  auto lines = read_lines(path);
  if (!lines) return lines.error();
  CurveKeys keys;
  for (const auto& [n, line] : *lines) {
    std::istringstream in(line);
    std::string field, value, extra;
    in >> field >> value >> extra;
    if ((field != "public" && field != "secret") || !extra.empty())
      return make_error(Errc::bad_format, where(path, n) + "expected `public KEY` or `secret KEY`");
    if (!valid_z85_key(value))
      return make_error(Errc::bad_format, where(path, n) + "not a CURVE key (40 Z85 characters)");
    (field == "public" ? keys.public_key : keys.secret_key) = value;
  }
  if (keys.public_key.empty() || keys.secret_key.empty())
    return make_error(Errc::bad_format,
                      path + ": a key file holds a `public` and a `secret` line (chorus keygen)");
  char derived[41] = {};
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0 || keys.public_key != derived)
    return make_error(Errc::bad_format, path + ": its public key is not the secret key's");
  return keys;
}

Result<std::string> read_curve_public(const std::string& path_or_key) {
  if (valid_z85_key(path_or_key)) return path_or_key;
  auto keys = read_allowed_keys({path_or_key});
  if (!keys) return keys.error();
  if (keys->size() != 1)
    return make_error(Errc::bad_format,
                      path_or_key + ": expected one public key, found " + std::to_string(keys->size()));
  return keys->front().key;
}

Result<std::vector<AllowedKey>> read_allowed_keys(const std::vector<std::string>& paths) {
  std::vector<AllowedKey> keys;
  for (const auto& path : paths) {
    auto lines = read_lines(path);
    if (!lines) return lines.error();
    for (const auto& [n, line] : *lines) {
      std::istringstream in(line);
      AllowedKey k;
      in >> k.key;
      std::getline(in, k.name);
      k.name = std::string(trim(k.name));
      if (k.key == "public" || k.key == "secret")
        return make_error(Errc::bad_format, where(path, n) + "this is a secret key file: give the .pub file");
      if (!valid_z85_key(k.key))
        return make_error(Errc::bad_format,
                          where(path, n) + "not a CURVE public key (40 Z85 characters, then a name)");
      if (k.name.empty()) k.name = k.key.substr(0, 8);
      keys.push_back(std::move(k));
    }
  }
  return keys;
}

bool is_loopback_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string host = endpoint.substr(6);
  if (const auto semi = host.find(';'); semi != std::string::npos)
    host = host.substr(semi + 1);  // source;dest
  if (!host.empty() && host[0] == '[') return host.rfind("[::1]:", 0) == 0;
  host = host.substr(0, host.find(':'));
  return host == "localhost" ||
         (host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos);
}

Status curve_server(zmq::socket_t& sock, const CurveKeys& keys, const std::string& domain) {
  const int on = 1;
  if (auto s = set_key(sock, ZMQ_CURVE_SECRETKEY, keys.secret_key, "secret key"); !s) return s;
  if (zmq_setsockopt(sock.handle(), ZMQ_CURVE_SERVER, &on, sizeof on) != 0 ||
      zmq_setsockopt(sock.handle(), ZMQ_ZAP_DOMAIN, domain.data(), domain.size()) != 0)
    return make_error(Errc::internal,
                      std::string("cannot make a CURVE server: ") + zmq_strerror(zmq_errno()));
  return {};
}

Status curve_client(zmq::socket_t& sock, const CurveKeys& keys, const std::string& server_key) {
  if (auto s = set_key(sock, ZMQ_CURVE_SERVERKEY, server_key, "server key"); !s) return s;
  if (auto s = set_key(sock, ZMQ_CURVE_PUBLICKEY, keys.public_key, "public key"); !s) return s;
  return set_key(sock, ZMQ_CURVE_SECRETKEY, keys.secret_key, "secret key");
}

struct CurveGate::Impl {
  zmq::socket_t sock;
  std::string domain, what;
  std::map<std::string, std::string> allowed;  // key -> name
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> accepted{0}, refused{0};
  std::thread thread;
  struct Seen {
    std::chrono::steady_clock::time_point logged;
    int64_t since = 0;  // refusals since the last line
  };
  std::map<std::string, Seen> seen;  // by key and address

  Impl(zmq::context_t& ctx) : sock(ctx, zmq::socket_type::rep) {}

  // One line for a peer's first refusal, then at most one a minute with the count.
  void log_refusal(const std::string& key, const std::string& address, const std::string& why) {
    const auto now = std::chrono::steady_clock::now();
    auto [it, fresh] = seen.try_emplace(key + " " + address);
    ++it->second.since;
    if (!fresh && now - it->second.logged < std::chrono::seconds(60)) return;
    spdlog::warn("{}: refused a connection from {} with CURVE key {}: {}{}", what, address, key, why,
                 fresh ? "" : " (" + std::to_string(it->second.since) + " attempts in the last minute)");
    it->second = Seen{now, 0};
  }

  void answer(const std::vector<zmq::message_t>& req) {
    auto text = [&](size_t i) { return i < req.size() ? req[i].to_string() : std::string(); };
    std::string status = "400", why = "malformed ZAP request", key_text = "-";
    if (req.size() >= 6 && text(0) == "1.0") {
      const std::string dom = text(2), mechanism = text(5);
      if (mechanism == "CURVE" && req.size() >= 7 && req[6].size() == 32) {
        key_text = z85(req[6].data<uint8_t>());
        if (dom != domain) {
          why = "not a socket of " + what;
        } else if (auto it = allowed.find(key_text); it != allowed.end()) {
          status = "200";
          why = it->second;
        } else {
          why = "not an allowed key";
        }
      } else {
        why = "mechanism " + mechanism + " is not accepted";
      }
    }
    if (status == "200") {
      ++accepted;
    } else {
      ++refused;
      log_refusal(key_text, text(3), why);
    }
    const std::string user = status == "200" ? why : "";
    const std::string parts[] = {"1.0", text(1), status, status == "200" ? "OK" : why, user, ""};
    for (size_t i = 0; i < 6; ++i)
      sock.send(zmq::buffer(parts[i]), i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }

  void run() {
    while (!stopping.load()) {
      zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) <= 0) continue;
      std::vector<zmq::message_t> req;
      do {
        zmq::message_t part;
        if (!sock.recv(part, zmq::recv_flags::dontwait)) break;
        req.push_back(std::move(part));
      } while (req.back().more());
      answer(req);
    }
    sock.close();
  }
};

Result<std::unique_ptr<CurveGate>> CurveGate::start(zmq::context_t& context, std::string domain,
                                                    std::vector<AllowedKey> allowed, std::string what) {
  auto impl = std::make_unique<Impl>(context);
  impl->domain = std::move(domain);
  impl->what = std::move(what);
  for (auto& k : allowed) impl->allowed[k.key] = k.name;
  impl->sock.set(zmq::sockopt::linger, 0);
  try {
    impl->sock.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return make_error(Errc::io, std::string("cannot start the CURVE gate (ZAP handler) of ") + impl->what +
                                    ": " + e.what() +
                                    (e.num() == EADDRINUSE ? " (one per ZeroMQ context)" : ""));
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<CurveGate>(new CurveGate(std::move(impl)));
}

CurveGate::CurveGate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CurveGate::~CurveGate() {
  impl_->stopping = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

int64_t CurveGate::accepted() const {
  return impl_->accepted.load();
}
int64_t CurveGate::refused() const {
  return impl_->refused.load();
}

}  // namespace chorus
