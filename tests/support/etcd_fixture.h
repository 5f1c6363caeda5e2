// A real etcd (Debian etcd-server) for a test: started on two free loopback ports with a data
// directory of its own, stopped and removed at the end. A missing etcd fails the test (setup.sh
// installs it): cluster tests must not pass by not running.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.h"

extern char** environ;

namespace chorus::test {

// A loopback port nobody listens on right now.
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t n = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

struct EtcdServer {
  pid_t pid = -1;
  std::string url;
  std::filesystem::path dir;

  // Starts etcd and waits (up to 20 s) until it grants a lease.
  ::testing::AssertionResult start() {
    const char* bin = "/usr/bin/etcd";
    if (access(bin, X_OK) != 0)
      return ::testing::AssertionFailure() << "etcd is not installed (Debian etcd-server; scripts/setup.sh)";
    char tmpl[] = "/tmp/chorus-etcd-XXXXXX";
    if (!mkdtemp(tmpl)) return ::testing::AssertionFailure() << "mkdtemp failed";
    dir = tmpl;
    const int client = free_port(), peer = free_port();
    url = "http://127.0.0.1:" + std::to_string(client);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    std::vector<std::string> args = {bin,
                                     "--name=test",
                                     "--data-dir=" + (dir / "data").string(),
                                     "--listen-client-urls=" + url,
                                     "--advertise-client-urls=" + url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=test=" + peer_url,
                                     "--logger=zap",
                                     "--log-outputs=" + (dir / "etcd.log").string()};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid, bin, nullptr, nullptr, argv.data(), environ) != 0)
      return ::testing::AssertionFailure() << "cannot start etcd";
    auto etcd = cluster::EtcdClient::open(url, 1.0);
    for (int i = 0; i < 200; ++i) {
      if ((*etcd)->grant(1).ok()) return ::testing::AssertionSuccess();
      if (waitpid(pid, nullptr, WNOHANG) == pid) {
        pid = -1;
        return ::testing::AssertionFailure() << "etcd exited at start; see " << (dir / "etcd.log");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return ::testing::AssertionFailure() << "etcd did not answer on " << url << " within 20 s";
  }

  void stop() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      dir.clear();
    }
  }
  ~EtcdServer() { stop(); }
};

// A test suite with one etcd for all its tests (each test of a suite runs in its own process under
// ctest, so in practice one etcd per test).
struct EtcdSuite : ::testing::Test {
  static void SetUpTestSuite() {
    server = new EtcdServer;
    ASSERT_TRUE(server->start());
  }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server, nullptr);
    ASSERT_FALSE(server->url.empty());
    auto c = cluster::EtcdClient::open(server->url);
    ASSERT_TRUE(c.ok());
    etcd = std::move(*c);
  }
  static inline EtcdServer* server = nullptr;
  std::unique_ptr<cluster::EtcdClient> etcd;
};

}  // namespace chorus::test
