#include "kiln/comm/auth_tcp/socket_io.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace kiln::auth_tcp {

bool read_full(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got == 0) {
      errno = 0;
      return false;
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool write_full(int fd, const void* data, size_t n, bool more) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
    if (put < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

namespace {

// One connect attempt, waited for until `deadline`: a blocking socket, or -1 with errno set.
int connect_once(const sockaddr_storage& to, Clock::time_point deadline) {
  const int fd = ::socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  const socklen_t len = to.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  int err = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), len) < 0) {
    err = errno;
    if (err == EINPROGRESS) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd, POLLOUT, 0};
      err = ETIMEDOUT;
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) > 0) {
        socklen_t el = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
      }
    }
  }
  if (err == 0) err = ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0 ? errno : 0;
  if (err != 0) {
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

int connect_until(const sockaddr_storage& to, Clock::time_point deadline, std::string* error) {
  auto pause = std::chrono::milliseconds(10);
  while (true) {
    const int fd = connect_once(to, deadline);
    if (fd >= 0) return fd;
    const int err = errno;
    if (Clock::now() + pause >= deadline) {
      *error = io_error_text(err);
      return -1;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

void set_io_timeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void set_no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string io_error_text(int err) {
  if (err == 0) return "end of stream";
  if (err == EAGAIN || err == EWOULDBLOCK) return "timed out";
  return std::strerror(err);
}

}  // namespace kiln::auth_tcp
