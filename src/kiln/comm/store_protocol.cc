#include "kiln/comm/store_protocol.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <system_error>

namespace kiln {
namespace {

using store_detail::load_le;
using store_detail::Reader;
using store_detail::Writer;

constexpr uint32_t kMagic = 0x4e4c494b;  // "KILN" read as a little-endian u32

const std::string& only_key(const StoreRequest& req) {
  KILN_CHECK(req.keys.size() == 1, "store op {} takes one key, got {}", static_cast<int>(req.op),
             req.keys.size());
  return req.keys[0];
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

// ---- Shared by the server and the client ------------------------------------------------------

namespace store_detail {

using std::chrono::milliseconds;

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string errno_text(int err) {
  if (err == kEof) return "connection closed by the server";
  return std::generic_category().message(err);
}

Clock::time_point deadline_after(milliseconds d) {
  const auto now = Clock::now();
  const auto room = std::chrono::duration_cast<milliseconds>(Clock::time_point::max() - now);
  if (d >= room) return Clock::time_point::max();
  return now + std::max(d, milliseconds(0));
}

int poll_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

std::string endpoint(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

void set_nodelay(int fd) {
  // Request/response traffic: Nagle would add a delayed-ACK round trip to every small request.
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace store_detail
}  // namespace kiln
