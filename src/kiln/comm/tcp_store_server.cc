// TcpStoreServer: one thread polls the listener and every connection, parses requests with
// parse_store_request (store_protocol.h) and answers GET and WAIT when their keys appear.
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/comm/tcp_store.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;
using store_detail::Clock;
using store_detail::deadline_after;
using store_detail::endpoint;
using store_detail::errno_text;
using store_detail::load_le;
using store_detail::poll_ms;
using store_detail::set_nodelay;
using store_detail::Status;
using store_detail::UniqueFd;
using store_detail::Writer;

// A connection being closed gets this long to take the server's last reply (the reason).
constexpr auto kDrainTime = std::chrono::seconds(2);
// A connection that has not said HELLO by then is dropped: scanners must not pin descriptors.
constexpr auto kHelloTime = std::chrono::seconds(60);
constexpr size_t kChunk = 64 * 1024;

Bytes counter_bytes(int64_t v) {
  Bytes b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
  return b;
}

// Compares in time independent of where the strings differ, so the token cannot be guessed a
// byte at a time from response latency.
bool same_token(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

std::string peer_name(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, serv,
                    sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown peer";
  }
  return endpoint(host, std::atoi(serv));
}

struct Waiter {
  StoreOp op;  // kGet or kWait
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

struct ServerConn {
  // kClosing: the last reply (why) is being sent; kDraining: it is sent and the write side shut,
  // input is read and dropped until EOF, so closing with unread input does not reset the
  // connection and destroy that reply before the client reads it.
  enum class State { kOpen, kClosing, kDraining };
  uint64_t id = 0;  // never reused: keys a closed client wrote still count against no one
  UniqueFd fd;
  std::string peer;
  State state = State::kOpen;
  bool authed = false;
  bool dead = false;
  Bytes in;
  Bytes out;
  size_t out_pos = 0;
  std::optional<Waiter> waiter;
  Clock::time_point deadline;  // for HELLO, or for the close to finish
  bool out_idle() const { return out_pos == out.size(); }
};

}  // namespace

struct TcpStoreServer::Impl {
  std::string token;
  StoreLimits limits;
  StoreLimits hello_limits;  // before HELLO nothing larger than a token is accepted
  UniqueFd listener;
  UniqueFd wake;
  int port = 0;
  std::atomic<bool> stop{false};
  std::thread thread;
  // Owned by the server thread alone.
  std::map<std::string, Bytes> data;
  // Who wrote each key last, and what each client and the whole store hold (StoreLimits).
  std::map<std::string, uint64_t> owner;
  std::map<uint64_t, uint64_t> held;
  uint64_t total_bytes = 0;
  uint64_t next_conn_id = 1;
  std::vector<std::unique_ptr<ServerConn>> conns;
  bool changed = false;  // data changed since the waiters were last checked
  Clock::time_point accept_paused_until;
  Bytes scratch = Bytes(kChunk);

  void run();
  void poll_once();
  void accept_all();
  void read_from(ServerConn& c);
  void process(ServerConn& c);
  void handle(ServerConn& c, StoreRequest& req);
  void serve_waiters();
  void flush(ServerConn& c);
  void reply(ServerConn& c, Bytes frame);
  void reply_error(ServerConn& c, const std::string& message);
  void close_with(ServerConn& c, Status status, const std::string& why);
  bool has(const std::string& key) const { return data.count(key) != 0; }
  // Stores `value` at `key` for `c`; the ERROR message instead when a StoreLimits bound would be
  // passed.
  std::optional<std::string> put(const ServerConn& c, const std::string& key, Bytes value);
  bool erase(const std::string& key);
};

std::optional<std::string> TcpStoreServer::Impl::put(const ServerConn& c, const std::string& key,
                                                     Bytes value) {
  const uint64_t bytes = key.size() + value.size();
  uint64_t old_bytes = 0, mine_now = held[c.id];
  const auto it = data.find(key);
  if (it != data.end()) {
    old_bytes = key.size() + it->second.size();
    if (owner[key] == c.id) mine_now -= old_bytes;
  }
  if (mine_now + bytes > limits.max_client_bytes) {
    return fmt::format("store: {} would hold {} bytes, over the limit of {} per client", c.peer,
                       mine_now + bytes, limits.max_client_bytes);
  }
  if (total_bytes - old_bytes + bytes > limits.max_store_bytes) {
    return fmt::format("store: the store would hold {} bytes, over its limit of {}",
                       total_bytes - old_bytes + bytes, limits.max_store_bytes);
  }
  if (it != data.end()) erase(key);
  held[c.id] += bytes;
  owner[key] = c.id;
  total_bytes += bytes;
  data[key] = std::move(value);
  changed = true;
  return std::nullopt;
}

bool TcpStoreServer::Impl::erase(const std::string& key) {
  const auto it = data.find(key);
  if (it == data.end()) return false;
  const uint64_t bytes = key.size() + it->second.size();
  const auto o = owner.find(key);
  held[o->second] -= bytes;
  owner.erase(o);
  total_bytes -= bytes;
  data.erase(it);
  return true;
}

void TcpStoreServer::Impl::run() {
  while (!stop.load()) {
    try {
      poll_once();
    } catch (const std::exception& e) {
      // Only allocation can throw here; drop the connections rather than the whole server.
      spdlog::error("store: server error, dropping all connections: {}", e.what());
      conns.clear();
    }
  }
}

void TcpStoreServer::Impl::poll_once() {
  std::vector<pollfd> fds;
  fds.push_back({wake.get(), POLLIN, 0});
  const bool accepting = Clock::now() >= accept_paused_until;
  fds.push_back({accepting ? listener.get() : -1, POLLIN, 0});
  Clock::time_point next = accepting ? Clock::time_point::max() : accept_paused_until;
  for (const auto& c : conns) {
    short ev = POLLRDHUP;
    if (!c->out_idle()) ev |= POLLOUT;
    if ((c->state == ServerConn::State::kOpen && !c->waiter && c->out_idle()) ||
        c->state == ServerConn::State::kDraining) {
      ev |= POLLIN;
    }
    if (c->waiter) next = std::min(next, c->waiter->deadline);
    if (!c->authed || c->state != ServerConn::State::kOpen) next = std::min(next, c->deadline);
    fds.push_back({c->fd.get(), ev, 0});
  }
  if (::poll(fds.data(), fds.size(), poll_ms(next)) < 0) {
    if (errno != EINTR) KILN_LOG_WARN("store: poll failed: {}", errno_text(errno));
    return;
  }
  if (fds[0].revents & POLLIN) {
    uint64_t v;
    (void)!::read(wake.get(), &v, sizeof v);
  }
  for (size_t i = 0; i < conns.size(); ++i) {
    ServerConn& c = *conns[i];
    const short re = fds[i + 2].revents;
    if (re == 0) continue;
    if (re & POLLOUT) flush(c);
    if (re & POLLIN) {
      read_from(c);
    } else if (re & (POLLERR | POLLHUP | POLLRDHUP)) {
      // Gone, or half-closed while a GET or WAIT is pending: our client never half-closes.
      c.dead = true;
    }
    if (!c.dead && c.out_idle()) process(c);
  }
  if (fds[1].revents & POLLIN) accept_all();
  serve_waiters();
  const auto now = Clock::now();
  for (auto& c : conns) {
    if ((c->authed && c->state == ServerConn::State::kOpen) || now < c->deadline) continue;
    if (!c->authed && c->state == ServerConn::State::kOpen) {
      KILN_LOG_WARN("store: dropping connection from {}: no HELLO in time", c->peer);
    }
    c->dead = true;
  }
  std::erase_if(conns, [](const auto& c) { return c->dead; });
}

void TcpStoreServer::Impl::accept_all() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors: back off instead of spinning on a listener that stays readable.
      KILN_LOG_WARN("store: accept failed: {}", errno_text(errno));
      accept_paused_until = Clock::now() + milliseconds(100);
      return;
    }
    set_nodelay(fd);
    auto c = std::make_unique<ServerConn>();
    c->id = next_conn_id++;
    c->fd = UniqueFd(fd);
    c->peer = peer_name(ss, len);
    c->deadline = Clock::now() + kHelloTime;
    conns.push_back(std::move(c));
  }
}

void TcpStoreServer::Impl::read_from(ServerConn& c) {
  const ssize_t n = ::recv(c.fd.get(), scratch.data(), scratch.size(), 0);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.dead = true;
    return;
  }
  if (n == 0) {
    c.dead = true;
    return;
  }
  if (c.state != ServerConn::State::kOpen) return;  // draining: dropped
  c.in.insert(c.in.end(), scratch.begin(), scratch.begin() + n);
}

// Handles the complete requests buffered on `c`, in order, stopping at a pending GET or WAIT or
// at a reply the socket has not taken yet: one request in flight bounds the memory per client.
void TcpStoreServer::Impl::process(ServerConn& c) {
  size_t pos = 0;
  try {
    while (c.state == ServerConn::State::kOpen && !c.waiter && c.out_idle() && !c.dead) {
      StoreRequest req;
      const size_t n = parse_store_request(c.in.data() + pos, c.in.size() - pos,
                                           c.authed ? limits : hello_limits, req);
      if (n == 0) break;
      pos += n;
      handle(c, req);
      flush(c);
    }
  } catch (const std::exception& e) {
    KILN_LOG_WARN("store: closing connection from {}: {}", c.peer, e.what());
    close_with(c, Status::kProtocol, e.what());
  }
  if (c.state != ServerConn::State::kOpen) {
    c.in = Bytes();
    return;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(pos));
  if (c.in.capacity() > 4 * kChunk && c.in.size() < kChunk) c.in.shrink_to_fit();
}

void TcpStoreServer::Impl::handle(ServerConn& c, StoreRequest& req) {
  Writer w;
  w.u8(static_cast<uint8_t>(Status::kOk));
  if (!c.authed) {
    if (req.op != StoreOp::kHello) fail("store: expected HELLO as the first frame");
    if (req.version != kStoreProtocolVersion) {
      fail("store: client speaks protocol version {}, this server {}", req.version,
           kStoreProtocolVersion);
    }
    if (!same_token(req.token, token)) {
      KILN_LOG_WARN("store: rejected connection from {}: wrong job token", c.peer);
      close_with(c, Status::kRejected, "");
      return;
    }
    c.authed = true;
    return reply(c, w.finish());
  }
  switch (req.op) {
    case StoreOp::kHello:
      fail("store: HELLO sent twice");
    case StoreOp::kSet:
      if (auto err = put(c, req.keys[0], std::move(req.value))) return reply_error(c, *err);
      break;
    case StoreOp::kGet:
    case StoreOp::kWait: {
      // Answered by serve_waiters, at once if the keys are there or the timeout is 0.
      const auto ms = static_cast<int64_t>(std::min<uint64_t>(req.timeout_ms, INT64_MAX));
      c.waiter = Waiter{req.op, std::move(req.keys), deadline_after(milliseconds(ms))};
      return;
    }
    case StoreOp::kAdd: {
      const std::string& key = req.keys[0];
      int64_t v = 0;
      if (auto it = data.find(key); it != data.end()) {
        if (it->second.size() != 8) {
          return reply_error(c, fmt::format("store: key {} does not hold a counter", key));
        }
        v = static_cast<int64_t>(load_le(it->second.data(), 8));
      }
      if (__builtin_add_overflow(v, req.delta, &v)) {
        return reply_error(c, fmt::format("store: counter {} overflows adding {}", key, req.delta));
      }
      if (auto err = put(c, key, counter_bytes(v))) return reply_error(c, *err);
      w.u64(static_cast<uint64_t>(v));
      break;
    }
    case StoreOp::kCheck:
      w.u8(std::all_of(req.keys.begin(), req.keys.end(), [&](auto& k) { return has(k); }));
      break;
    case StoreOp::kDelete:
      w.u8(erase(req.keys[0]));
      break;
  }
  reply(c, w.finish());
}

void TcpStoreServer::Impl::serve_waiters() {
  // Answering a waiter lets its connection go on to buffered requests, which may change the data
  // again: repeat until a pass changes nothing.
  const auto now = Clock::now();
  do {
    changed = false;
    for (auto& cp : conns) {
      ServerConn& c = *cp;
      if (!c.waiter || c.dead) continue;
      const Waiter& wt = *c.waiter;
      std::vector<std::string> missing;
      for (const auto& k : wt.keys) {
        if (!has(k)) missing.push_back(k);
      }
      if (!missing.empty() && now < wt.deadline) continue;
      Writer w;
      if (missing.empty()) {
        w.u8(static_cast<uint8_t>(Status::kOk));
        if (wt.op == StoreOp::kGet) {
          const Bytes& v = data.at(wt.keys[0]);
          w.bytes(v.data(), v.size());
        }
      } else {
        w.u8(static_cast<uint8_t>(Status::kTimeout));
        w.u32(static_cast<uint32_t>(missing.size()));
        for (const auto& k : missing) w.str(k);
      }
      c.waiter.reset();
      reply(c, w.finish());
      flush(c);
      process(c);
    }
  } while (changed);
}

void TcpStoreServer::Impl::flush(ServerConn& c) {
  while (!c.out_idle() && !c.dead) {
    const ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      return;
    }
    c.out_pos += static_cast<size_t>(n);
  }
  if (c.dead) return;
  c.out = Bytes();
  c.out_pos = 0;
  if (c.state == ServerConn::State::kClosing) {
    ::shutdown(c.fd.get(), SHUT_WR);
    c.state = ServerConn::State::kDraining;
  }
}

void TcpStoreServer::Impl::reply(ServerConn& c, Bytes frame) {
  if (c.out.empty()) {
    c.out = std::move(frame);
  } else {
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
}

void TcpStoreServer::Impl::reply_error(ServerConn& c, const std::string& message) {
  Writer e;
  e.u8(static_cast<uint8_t>(Status::kError));
  e.str(message);
  reply(c, e.finish());
}

void TcpStoreServer::Impl::close_with(ServerConn& c, Status status, const std::string& why) {
  Writer w;
  w.u8(static_cast<uint8_t>(status));
  if (status == Status::kProtocol) w.str(why);
  c.waiter.reset();
  reply(c, w.finish());
  c.state = ServerConn::State::kClosing;
  c.deadline = Clock::now() + kDrainTime;
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string token,
                               StoreLimits limits)
    : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535) fail("store: cannot listen on port {}: out of range", port);
  impl_->token = std::move(token);
  impl_->limits = limits;
  impl_->hello_limits = StoreLimits{limits.max_key_bytes, 0};

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string where = endpoint(host.empty() ? "0.0.0.0" : host, port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                               &hints, &res);
  if (rc != 0) fail("store: cannot listen on {}: {}", where, ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  int err = 0;
  for (const addrinfo* p = res; p != nullptr && !impl_->listener; p = p->ai_next) {
    UniqueFd fd(
        ::socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, p->ai_protocol));
    const int one = 1;
    if (fd && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        ::bind(fd.get(), p->ai_addr, p->ai_addrlen) == 0 && ::listen(fd.get(), SOMAXCONN) == 0) {
      impl_->listener = std::move(fd);
    } else {
      err = errno;
    }
  }
  if (!impl_->listener) fail("store: cannot listen on {}: {}", where, errno_text(err));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(impl_->listener.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  impl_->port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  impl_->wake = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl_->wake) fail("store: eventfd failed: {}", errno_text(errno));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stop = true;
  const uint64_t one = 1;
  (void)!::write(impl_->wake.get(), &one, sizeof one);
  impl_->thread.join();
}

int TcpStoreServer::port() const { return impl_->port; }

}  // namespace kiln
