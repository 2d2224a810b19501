// Loopback TCP sockets for the tests that stand in for a server or a client of kiln's: one
// place that fills in 127.0.0.1 and binds.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace kiln::testing {

// 127.0.0.1:port (port 0: any).
inline sockaddr_in loopback_address(int port = 0) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// A TCP socket bound to 127.0.0.1:port (0: an ephemeral port), listening when backlog > 0; -1
// (nothing left open) when the bind or listen fails. *bound_port: the port it holds.
inline int bind_loopback(int port, int backlog = 0, int* bound_port = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = loopback_address(port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      (backlog > 0 && ::listen(fd, backlog) != 0)) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (bound_port != nullptr) *bound_port = ntohs(a.sin_port);
  return fd;
}

// Whether loopback port `port` can be bound now (nothing listens or is connected from it).
inline bool loopback_port_free(int port) {
  const int fd = bind_loopback(port);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

// A loopback port free a moment ago (bound, then released).
inline int free_loopback_port() {
  int port = 0;
  ::close(bind_loopback(0, 0, &port));
  return port;
}

// A socket connected to 127.0.0.1:port, or -1.
inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in a = loopback_address(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace kiln::testing
