#include "kiln/comm/auth_tcp/listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/comm/auth_tcp/address.h"
#include "kiln/comm/auth_tcp/socket_io.h"

namespace kiln::auth_tcp {

struct Listener::Pending {
  int fd = -1;
  std::string peer;
  Clock::time_point deadline;
  bool hello_done = false;  // then waiting for the proof
  uint8_t buf[kHelloBytes] = {};
  size_t got = 0;
  Hello hello;
  Nonce nonce{};  // the listener's
};

Listener::Listener(const sockaddr_storage& bind_to, std::string token, ListenerLimits limits,
                   Check check, Deliver deliver)
    : token_(std::move(token)),
      limits_(limits),
      check_(std::move(check)),
      deliver_(std::move(deliver)),
      bound_(bind_to) {
  KILN_CHECK(!token_.empty(), "auth_tcp: the pair token is empty");
  if (bound_.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(bound_).sin_port = 0;
  if (bound_.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(bound_).sin6_port = 0;
  listen_fd_ = ::socket(bound_.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  KILN_CHECK(listen_fd_ >= 0, "auth_tcp: socket: {}", std::strerror(errno));
  socklen_t len = bound_.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&bound_), len) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    fail("auth_tcp: cannot listen on {}: {}", sockaddr_text(bind_to), std::strerror(err));
  }
  len = sizeof bound_;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound_), &len);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  KILN_CHECK(wake_fd_ >= 0, "auth_tcp: eventfd: {}", std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

Listener::~Listener() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
  thread_.join();
  ::close(wake_fd_);
  ::close(listen_fd_);
}

void Listener::run() {
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (true) {
    fds.assign({{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    auto next = Clock::now() + std::chrono::seconds(60);
    for (const Pending& p : pending) {
      fds.push_back({p.fd, POLLIN, 0});
      next = std::min(next, p.deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (n < 0 && errno != EINTR) {
      KILN_LOG_WARN("gloo auth: the listener on {} stopped: poll: {}", sockaddr_text(bound_),
                    std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;
    // Handshakes first (fds[i + 2] is pending[i]), then expired ones, then new connections.
    std::vector<Pending> still;
    const auto now = Clock::now();
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      if (fds[i + 2].revents != 0) {
        if (advance(p)) still.push_back(p);
      } else if (now >= p.deadline) {
        reject(p, fmt::format("it stayed silent past the {} ms handshake deadline",
                              limits_.handshake_deadline.count()));
      } else {
        still.push_back(p);
      }
    }
    pending = std::move(still);
    if (fds[1].revents != 0) accept_one(pending);
  }
  for (Pending& p : pending) ::close(p.fd);
}

void Listener::accept_one(std::vector<Pending>& pending) {
  sockaddr_storage from{};
  socklen_t len = sizeof from;
  const int fd =
      ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    // Out of descriptors (the process's, not ours: pending handshakes are capped): back off
    // instead of spinning on a listener that stays readable. Else EAGAIN, or a reset.
    if (errno == EMFILE || errno == ENFILE)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return;
  }
  if (pending.size() >= limits_.max_pending) {
    reject(pending.front(), fmt::format("{} handshakes were pending at once (the limit); this "
                                        "oldest one makes room",
                                        pending.size()));
    pending.erase(pending.begin());
  }
  Pending p;
  p.fd = fd;
  p.peer = sockaddr_text(from);
  p.deadline = Clock::now() + limits_.handshake_deadline;
  pending.push_back(p);
}

bool Listener::advance(Pending& p) {
  const size_t want = p.hello_done ? kProofBytes : kHelloBytes;
  const ssize_t got = ::recv(p.fd, p.buf + p.got, want - p.got, 0);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (got <= 0) {
    reject(p, fmt::format("it closed the connection mid-handshake ({})",
                          io_error_text(got == 0 ? 0 : errno)));
    return false;
  }
  p.got += static_cast<size_t>(got);
  if (p.got < want) return true;
  p.got = 0;
  return p.hello_done ? on_proof(p) : on_hello(p);
}

bool Listener::on_hello(Pending& p) {
  const std::optional<Hello> hello = decode_hello(p.buf);
  if (!hello) {
    reject(p, "it did not send a kiln pair hello");
    return false;
  }
  if (const std::string why = check_(*hello); !why.empty()) {
    reject(p, why);
    return false;
  }
  p.hello = *hello;
  p.nonce = random_nonce();
  const Mac mac = pair_mac(token_, Role::kListener, p.hello, p.nonce);
  uint8_t challenge[kChallengeBytes];
  std::memcpy(challenge, p.nonce.data(), p.nonce.size());
  std::memcpy(challenge + p.nonce.size(), mac.data(), mac.size());
  // A fresh socket's send buffer takes these 64 bytes whole.
  if (::send(p.fd, challenge, sizeof challenge, MSG_NOSIGNAL) != sizeof challenge) {
    reject(p, "sending the challenge failed: " + io_error_text(errno));
    return false;
  }
  p.hello_done = true;
  return true;
}

bool Listener::on_proof(Pending& p) {
  if (!mac_matches(pair_mac(token_, Role::kConnector, p.hello, p.nonce), p.buf)) {
    reject(p, "its MAC does not match (it does not hold this job's token)");
    return false;
  }
  const uint8_t ok = kAccepted;
  if (::send(p.fd, &ok, 1, MSG_NOSIGNAL) != 1 ||
      ::fcntl(p.fd, F_SETFL, ::fcntl(p.fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    reject(p, "accepting it failed: " + io_error_text(errno));
    return false;
  }
  deliver_(p.hello, p.fd, p.peer);
  return false;
}

void Listener::reject(Pending& p, const std::string& why) {
  KILN_LOG_WARN("gloo auth: rejected a connection from {} to {}: {}", p.peer, sockaddr_text(bound_),
                why);
  ::close(p.fd);
}

}  // namespace kiln::auth_tcp
