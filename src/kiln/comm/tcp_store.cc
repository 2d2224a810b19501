#include "kiln/comm/tcp_store.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <thread>
#include <utility>

#include "kiln/base/error.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;
using store_detail::Clock;
using store_detail::deadline_after;
using store_detail::endpoint;
using store_detail::errno_text;
using store_detail::kEof;
using store_detail::load_le;
using store_detail::poll_ms;
using store_detail::Reader;
using store_detail::set_nodelay;
using store_detail::Status;
using store_detail::UniqueFd;

milliseconds saturating_add(milliseconds a, milliseconds b) {
  a = std::max(a, milliseconds(0));
  b = std::max(b, milliseconds(0));
  return a > milliseconds::max() - b ? milliseconds::max() : a + b;
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
