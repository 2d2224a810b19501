// The listening socket of an authenticated device and the thread that runs the listener's side
// of every handshake (handshake.h). It never blocks on one connection: handshakes advance as
// bytes arrive (poll), each has a deadline, and at most `max_pending` run at once (a new
// connection beyond that evicts the oldest pending one, so a flood of silent connections cannot
// starve a real peer, whose handshake takes one round trip). A connection that sends junk, a
// hello the owner refuses, a wrong MAC, or nothing until its deadline is closed with a warning
// naming the peer's address, and the listener keeps accepting. Authenticated connections go to
// the owner's `deliver`.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "kiln/comm/auth_tcp/handshake.h"

namespace kiln::auth_tcp {

struct ListenerLimits {
  std::chrono::milliseconds handshake_deadline{3000};
  size_t max_pending = 32;
};

class Listener {
 public:
  // "" to go on with a hello, else why it is refused (unknown context, ranks that do not fit).
  using Check = std::function<std::string(const Hello&)>;
  // An authenticated blocking socket, owned by the callee from then on; `peer` is its address.
  using Deliver = std::function<void(const Hello&, int fd, const std::string& peer)>;

  // Binds `bind_to` (its port replaced by an ephemeral one) and starts accepting.
  Listener(const sockaddr_storage& bind_to, std::string token, ListenerLimits limits, Check check,
           Deliver deliver);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // The bound address, port included.
  const sockaddr_storage& address() const { return bound_; }

 private:
  struct Pending;
  void run();
  void accept_one(std::vector<Pending>& pending);
  // Reads what `p` has sent; false once it is finished (delivered or rejected and closed).
  bool advance(Pending& p);
  bool on_hello(Pending& p);
  bool on_proof(Pending& p);
  void reject(Pending& p, const std::string& why);

  std::string token_;
  ListenerLimits limits_;
  Check check_;
  Deliver deliver_;
  sockaddr_storage bound_{};
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: the destructor's stop signal
  std::thread thread_;
};

}  // namespace kiln::auth_tcp
