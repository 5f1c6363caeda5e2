// How chorus's HTTP servers (the gateway, the metrics listener) bind: SO_REUSEADDR only.
// cpp-httplib's default also sets SO_REUSEPORT, under which a second server on a port in use
// binds without an error and the kernel splits the connections between the two.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <string>

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

}  // namespace chorus
