// The listening socket of chorus's HTTP servers (the gateway, the metrics listener): SO_REUSEADDR
// only. cpp-httplib's default also sets SO_REUSEPORT, under which a second server on a port in
// use binds without an error and the kernel splits the connections between the two.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

namespace chorus {

inline void listen_exclusively(httplib::Server& svr) {
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

}  // namespace chorus
