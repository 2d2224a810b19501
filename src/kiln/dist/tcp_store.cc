#include "kiln/dist/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "kiln/base/error.h"
#include "kiln/base/log.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kMagic = 0x4e4c494b;  // "KILN" read as a little-endian u32
enum class Status : uint8_t { kOk = 0, kTimeout, kError, kRejected, kProtocol };
// A connection being closed gets this long to take the server's last reply (the reason).
constexpr auto kDrainTime = std::chrono::seconds(2);
// A connection that has not said HELLO by then is dropped: scanners must not pin descriptors.
constexpr auto kHelloTime = std::chrono::seconds(60);
constexpr size_t kChunk = 64 * 1024;
constexpr int kEof = -1;  // an I/O result: the peer closed the connection

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::string errno_text(int err) {
  if (err == kEof) return "connection closed by the server";
  return std::generic_category().message(err);
}

// now + d, saturating: a "wait forever" timeout must not overflow the clock.
Clock::time_point deadline_after(milliseconds d) {
  const auto now = Clock::now();
  const auto room = std::chrono::duration_cast<milliseconds>(Clock::time_point::max() - now);
  if (d >= room) return Clock::time_point::max();
  return now + std::max(d, milliseconds(0));
}

milliseconds saturating_add(milliseconds a, milliseconds b) {
  a = std::max(a, milliseconds(0));
  b = std::max(b, milliseconds(0));
  return a > milliseconds::max() - b ? milliseconds::max() : a + b;
}

// Milliseconds left until `deadline`, rounded up, for poll(): -1 means never.
int poll_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

uint64_t load_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

Bytes counter_bytes(int64_t v) {
  Bytes b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
  return b;
}

// Builds one frame; the length field is filled in by finish().
class Writer {
 public:
  Writer() : out_(4) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void bytes(const uint8_t* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    out_.insert(out_.end(), p, p + n);
  }
  void str(const std::string& s) { bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  Bytes finish() {
    const uint64_t n = out_.size() - 4;
    for (int i = 0; i < 4; ++i) out_[i] = static_cast<uint8_t>(n >> (8 * i));
    return std::move(out_);
  }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  Bytes out_;
};

// Bounds-checked reads from one frame body: running off the end is a kiln::Error.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  uint8_t u8(const char* what) { return *take(1, what); }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(load_le(take(4, what), 4)); }
  uint64_t u64(const char* what) { return load_le(take(8, what), 8); }
  std::string str(uint32_t max, const char* what) {
    const uint8_t* p = take(sized(max, what), what);
    return std::string(p, p + (p_ - p));
  }
  Bytes blob(uint32_t max, const char* what) {
    const uint8_t* p = take(sized(max, what), what);
    return Bytes(p, p_);
  }

 private:
  uint32_t sized(uint32_t max, const char* what) {
    const uint32_t n = u32(what);
    if (n > max) fail("store: {} of {} bytes is over the {}-byte limit", what, n, max);
    return n;
  }
  const uint8_t* take(size_t n, const char* what) {
    if (n > left()) fail("store: frame ends inside the {}", what);
    const uint8_t* p = p_;
    p_ += n;
    return p;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

const std::string& only_key(const StoreRequest& req) {
  KILN_CHECK(req.keys.size() == 1, "store op {} takes one key, got {}", static_cast<int>(req.op),
             req.keys.size());
  return req.keys[0];
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

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// "key 'a'" or "keys 'a', 'b'", clipped: an over-long key is itself the subject of some errors.
std::string describe_keys(const std::vector<std::string>& keys) {
  std::string out = keys.size() == 1 ? "key " : "keys ";
  for (size_t i = 0; i < keys.size() && i < 8; ++i) {
    const std::string& k = keys[i];
    out += (i ? ", '" : "'") + (k.size() > 64 ? k.substr(0, 64) + "..." : k) + "'";
  }
  if (keys.size() > 8) out += fmt::format(" and {} more", keys.size() - 8);
  return out;
}

std::string endpoint(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

std::string peer_name(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, serv,
                    sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown peer";
  }
  return endpoint(host, std::atoi(serv));
}

void set_nodelay(int fd) {
  // Request/response traffic: Nagle would add a delayed-ACK round trip to every small request.
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

size_t parse_store_request(const uint8_t* data, size_t size, const StoreLimits& limits,
                           StoreRequest& out) {
  if (size < 4) return 0;
  const uint64_t body = load_le(data, 4);
  if (body == 0) fail("store: empty frame");
  if (body > limits.max_frame_bytes()) {
    fail("store: frame of {} bytes is over the {}-byte limit", body, limits.max_frame_bytes());
  }
  if (size - 4 < body) return 0;
  Reader r(data + 4, body);
  StoreRequest req;
  const uint8_t op = r.u8("op");
  auto key = [&] { req.keys.push_back(r.str(limits.max_key_bytes, "key")); };
  auto key_list = [&] {
    const uint32_t n = r.u32("key count");
    // Each key costs at least its length field, which bounds the reservation by the frame.
    if (n > r.left() / 4) fail("store: key count {} does not fit in the frame", n);
    req.keys.reserve(n);
    for (uint32_t i = 0; i < n; ++i) key();
  };
  switch (static_cast<StoreOp>(op)) {
    case StoreOp::kHello: {
      const uint32_t magic = r.u32("magic");
      if (magic != kMagic) fail("store: not a kiln store client (magic {:#x})", magic);
      req.version = r.u32("version");
      req.token = r.str(limits.max_key_bytes, "token");
      break;
    }
    case StoreOp::kSet:
      key();
      req.value = r.blob(limits.max_value_bytes, "value");
      break;
    case StoreOp::kGet:
      key();
      req.timeout_ms = r.u64("timeout");
      break;
    case StoreOp::kAdd:
      key();
      req.delta = static_cast<int64_t>(r.u64("delta"));
      break;
    case StoreOp::kWait:
      key_list();
      req.timeout_ms = r.u64("timeout");
      break;
    case StoreOp::kCheck:
      key_list();
      break;
    case StoreOp::kDelete:
      key();
      break;
    default:
      fail("store: unknown op {}", op);
  }
  if (r.left() != 0) fail("store: {} bytes left over in a frame of op {}", r.left(), op);
  req.op = static_cast<StoreOp>(op);
  out = std::move(req);
  return 4 + body;
}

Bytes encode_store_request(const StoreRequest& req) {
  Writer w;
  w.u8(static_cast<uint8_t>(req.op));
  auto key_list = [&] {
    w.u32(static_cast<uint32_t>(req.keys.size()));
    for (const auto& k : req.keys) w.str(k);
  };
  switch (req.op) {
    case StoreOp::kHello:
      w.u32(kMagic);
      w.u32(req.version);
      w.str(req.token);
      break;
    case StoreOp::kSet:
      w.str(only_key(req));
      w.bytes(req.value.data(), req.value.size());
      break;
    case StoreOp::kGet:
      w.str(only_key(req));
      w.u64(req.timeout_ms);
      break;
    case StoreOp::kAdd:
      w.str(only_key(req));
      w.u64(static_cast<uint64_t>(req.delta));
      break;
    case StoreOp::kWait:
      key_list();
      w.u64(req.timeout_ms);
      break;
    case StoreOp::kCheck:
      key_list();
      break;
    case StoreOp::kDelete:
      w.str(only_key(req));
      break;
  }
  return w.finish();
}

// ---- Server ----------------------------------------------------------------------------------

namespace {

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
  void close_with(ServerConn& c, Status status, const std::string& why);
  bool has(const std::string& key) const { return data.count(key) != 0; }
};

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
      data[req.keys[0]] = std::move(req.value);
      changed = true;
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
          Writer e;
          e.u8(static_cast<uint8_t>(Status::kError));
          e.str(fmt::format("store: key {} does not hold a counter", key));
          return reply(c, e.finish());
        }
        v = static_cast<int64_t>(load_le(it->second.data(), 8));
      }
      if (__builtin_add_overflow(v, req.delta, &v)) {
        Writer e;
        e.u8(static_cast<uint8_t>(Status::kError));
        e.str(fmt::format("store: counter {} overflows adding {}", key, req.delta));
        return reply(c, e.finish());
      }
      data[key] = counter_bytes(v);
      changed = true;
      w.u64(static_cast<uint64_t>(v));
      break;
    }
    case StoreOp::kCheck:
      w.u8(std::all_of(req.keys.begin(), req.keys.end(), [&](auto& k) { return has(k); }));
      break;
    case StoreOp::kDelete:
      w.u8(data.erase(req.keys[0]) != 0);
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

// ---- Client ----------------------------------------------------------------------------------

namespace {

// 0, an errno value (ETIMEDOUT at the deadline) or kEof.
int send_all(int fd, const uint8_t* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    pollfd pfd{fd, POLLOUT, 0};
    const int r = ::poll(&pfd, 1, poll_ms(deadline));
    if (r == 0) return ETIMEDOUT;
    if (r < 0 && errno != EINTR) return errno;
  }
  return 0;
}

int recv_all(int fd, uint8_t* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return kEof;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, poll_ms(deadline));
    if (r == 0) return ETIMEDOUT;
    if (r < 0 && errno != EINTR) return errno;
  }
  return 0;
}

// One response frame's body into `body`; a length over `max` or 0 reads as EPROTO.
int read_frame(int fd, uint64_t max, Clock::time_point deadline, Bytes& body) {
  uint8_t head[4];
  if (const int e = recv_all(fd, head, 4, deadline)) return e;
  const uint64_t n = load_le(head, 4);
  if (n == 0 || n > max) return EPROTO;
  body.resize(n);
  return recv_all(fd, body.data(), n, deadline);
}

// One attempt at every address of host:port; on failure `err` says why.
UniqueFd connect_once(const std::string& host, int port, Clock::time_point deadline,
                      std::string& err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    err = fmt::format("cannot resolve {}: {}", host, ::gai_strerror(rc));
    return {};
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  for (const addrinfo* p = res; p != nullptr; p = p->ai_next) {
    UniqueFd fd(
        ::socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, p->ai_protocol));
    if (!fd) {
      err = errno_text(errno);
      continue;
    }
    if (::connect(fd.get(), p->ai_addr, p->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        err = errno_text(errno);
        continue;
      }
      pollfd pfd{fd.get(), POLLOUT, 0};
      int r;
      do {
        r = ::poll(&pfd, 1, poll_ms(deadline));
      } while (r < 0 && errno == EINTR);
      int so = 0;
      socklen_t len = sizeof so;
      if (r == 0) so = ETIMEDOUT;
      if (r > 0) ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so, &len);
      if (r < 0 || so != 0) {
        err = errno_text(r < 0 ? errno : so);
        continue;
      }
    }
    set_nodelay(fd.get());
    return fd;
  }
  return {};
}

// Closes the connection for good: after a network failure or a rejected frame the byte stream
// cannot be trusted to be at a frame boundary.
[[noreturn]] void fail_closed(UniqueFd& fd, std::string& broken, const std::string& what,
                              const std::string& why) {
  fd.reset();
  broken = why;
  fail("{} failed: {}", what, why);
}

uint64_t to_ms(milliseconds t) { return static_cast<uint64_t>(std::max<int64_t>(t.count(), 0)); }

}  // namespace

struct TcpStore::Conn {
  UniqueFd fd;
  std::string broken;  // the error that closed the connection
};

TcpStore::TcpStore(std::string host, int port, std::string token, milliseconds connect_timeout,
                   TcpStoreOptions options)
    : host_(std::move(host)),
      port_(port),
      endpoint_(endpoint(host_, port)),
      options_(options),
      conn_(std::make_unique<Conn>()) {
  if (port <= 0 || port > 65535) fail("store: cannot connect to {}: port out of range", endpoint_);
  if (token.size() > options_.limits.max_key_bytes) {
    fail("store: job token of {} bytes is over the {}-byte limit", token.size(),
         options_.limits.max_key_bytes);
  }
  const auto deadline = deadline_after(connect_timeout);
  auto backoff = milliseconds(10);
  std::string err;
  for (;;) {
    conn_->fd = connect_once(host_, port_, deadline, err);
    if (conn_->fd) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      fail("store: could not connect to {} within {} ms: {}", endpoint_, connect_timeout.count(),
           err);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
  StoreRequest hello;
  hello.token = std::move(token);
  request("HELLO", hello, milliseconds(0));
}

TcpStore::~TcpStore() = default;

Bytes TcpStore::request(const char* op, const StoreRequest& req, milliseconds wait) {
  const StoreLimits& lim = options_.limits;
  const std::string what =
      req.op == StoreOp::kHello
          ? fmt::format("store: HELLO to {}", endpoint_)
          : fmt::format("store: {} of {} on {}", op, describe_keys(req.keys), endpoint_);
  // Checked here so an oversized request is a clear error, not a connection the server drops.
  for (const auto& k : req.keys) {
    if (k.size() > lim.max_key_bytes) {
      fail("{} failed: a key of {} bytes is over the {}-byte limit", what, k.size(),
           lim.max_key_bytes);
    }
  }
  if (req.value.size() > lim.max_value_bytes) {
    fail("{} failed: a value of {} bytes is over the {}-byte limit", what, req.value.size(),
         lim.max_value_bytes);
  }
  const Bytes frame = encode_store_request(req);
  if (frame.size() - 4 > lim.max_frame_bytes()) {
    fail("{} failed: a request of {} bytes is over the {}-byte limit", what, frame.size() - 4,
         lim.max_frame_bytes());
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (!conn_->broken.empty()) {
    fail("{} failed: the connection was closed after an earlier error: {}", what, conn_->broken);
  }
  auto broken = [&](const std::string& why) { fail_closed(conn_->fd, conn_->broken, what, why); };
  const milliseconds budget = saturating_add(wait, options_.io_timeout);
  const auto deadline = deadline_after(budget);
  const int fd = conn_->fd.get();
  int err = send_all(fd, frame.data(), frame.size(), deadline);
  Bytes body;
  if (err != ETIMEDOUT) {
    // Even after a failed send the server may have said why it closed the connection.
    const int rerr = read_frame(fd, lim.max_frame_bytes(), deadline, body);
    err = rerr == 0 ? 0 : (err != 0 ? err : rerr);
  }
  if (err == ETIMEDOUT) broken(fmt::format("no response within {} ms", budget.count()));
  if (err == EPROTO) broken("malformed response frame");
  if (err != 0) broken(errno_text(err));

  Reader r(body.data() + 1, body.size() - 1);
  auto message = [&] {  // the server's words, without a second "store: "
    std::string m = r.str(UINT32_MAX, "message");
    return m.starts_with("store: ") ? m.substr(7) : m;
  };
  switch (static_cast<Status>(body[0])) {
    case Status::kOk:
      return Bytes(body.begin() + 1, body.end());
    case Status::kTimeout: {
      std::vector<std::string> missing;
      const uint32_t n = r.u32("key count");
      for (uint32_t i = 0; i < n; ++i) missing.push_back(r.str(UINT32_MAX, "key"));
      fail("store: timed out after {} ms waiting for keys: {} (store at {})", wait.count(),
           join_keys(missing), endpoint_);
    }
    case Status::kError:
      fail("{} failed: {}", what, message());
    case Status::kRejected:
      conn_->fd.reset();
      conn_->broken = "connection rejected (wrong job token)";
      fail("store: connection rejected by {} (wrong job token)", endpoint_);
    case Status::kProtocol:
      broken("the server closed the connection: " + message());
      break;
  }
  fail_closed(conn_->fd, conn_->broken, what, fmt::format("unknown response status {}", body[0]));
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  StoreRequest req;
  req.op = StoreOp::kSet;
  req.keys = {key};
  req.value = value;
  request("SET", req, milliseconds(0));
}

Bytes TcpStore::get(const std::string& key, milliseconds timeout) {
  StoreRequest req;
  req.op = StoreOp::kGet;
  req.keys = {key};
  req.timeout_ms = to_ms(timeout);
  const Bytes payload = request("GET", req, timeout);
  Reader r(payload.data(), payload.size());
  return r.blob(UINT32_MAX, "value");
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  StoreRequest req;
  req.op = StoreOp::kAdd;
  req.keys = {key};
  req.delta = delta;
  const Bytes payload = request("ADD", req, milliseconds(0));
  Reader r(payload.data(), payload.size());
  return static_cast<int64_t>(r.u64("counter"));
}

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  StoreRequest req;
  req.op = StoreOp::kWait;
  req.keys = keys;
  req.timeout_ms = to_ms(timeout);
  request("WAIT", req, timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  StoreRequest req;
  req.op = StoreOp::kCheck;
  req.keys = keys;
  const Bytes payload = request("CHECK", req, milliseconds(0));
  Reader r(payload.data(), payload.size());
  return r.u8("result") != 0;
}

bool TcpStore::remove(const std::string& key) {
  StoreRequest req;
  req.op = StoreOp::kDelete;
  req.keys = {key};
  const Bytes payload = request("DELETE", req, milliseconds(0));
  Reader r(payload.data(), payload.size());
  return r.u8("result") != 0;
}

}  // namespace kiln
