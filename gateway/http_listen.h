// How chorus's HTTP servers (the gateway, the metrics listener) bind: SO_REUSEADDR only.
// cpp-httplib's default also sets SO_REUSEPORT, under which a second server on a port in use
// binds without an error and the kernel splits the connections between the two.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <string>
#include <thread>

namespace chorus {

// Binds `svr` to host:port (0: any free port) alone; returns the port, or -1 when it cannot.
inline int bind_exclusively(httplib::Server& svr, const std::string& host, int port) {
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (port != 0) return svr.bind_to_port(host, port) ? port : -1;
  const int any = svr.bind_to_any_port(host);
  return any > 0 ? any : -1;
}

// A small server of its own (the metrics and control listeners): bound alone, then listening on
// a thread of its own until destroyed.
struct HttpListener {
  httplib::Server svr;
  std::thread thread;
  int port = 0;

  // bind_exclusively, then listening; false when it cannot bind.
  bool start(const std::string& host, int want) {
    port = bind_exclusively(svr, host, want);
    if (port <= 0) return false;
    thread = std::thread([this] { svr.listen_after_bind(); });
    return true;
  }
  ~HttpListener() {
    svr.stop();
    if (thread.joinable()) thread.join();
  }
};

}  // namespace chorus
