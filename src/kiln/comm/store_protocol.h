// The TCP store's wire protocol (the store itself is in tcp_store.h): the request frame parser and
// encoder, and the framing and socket helpers that the server (tcp_store_server.cc) and the
// client (tcp_store.cc) share. The parser does no I/O; the fuzz target
// (fuzz/store_protocol_fuzz.cc) compiles store_protocol.cc alone, with the sanitizers.
//
// Wire protocol, version 1. Integers are little-endian.
//   frame = u32 body_len | body              body_len counts the bytes after the length field
//   str   = u32 n | n bytes                  a key (n <= max_key_bytes) or the token
//   blob  = u32 n | n bytes                  a value (n <= max_value_bytes)
// Request body = u8 op | fields:
//   1 HELLO   u32 magic "KILN" (0x4e4c494b) | u32 version | str token     first frame, only once
//   2 SET     str key | blob value
//   3 GET     str key | u64 timeout_ms       answered once the key exists, or TIMEOUT
//   4 ADD     str key | i64 delta            a counter is an 8-byte little-endian int64 value
//   5 WAIT    u32 n | n * str key | u64 timeout_ms
//   6 CHECK   u32 n | n * str key
//   7 DELETE  str key
// Response body = u8 status | fields:
//   0 OK        GET: blob value; ADD: i64 new value; CHECK, DELETE: u8 0 or 1; others: nothing
//   1 TIMEOUT   u32 n | n * str missing key   (GET, WAIT)
//   2 ERROR     str message                   the operation failed; the connection stays usable
//   3 REJECTED  nothing                       wrong token; the server closes the connection
//   4 PROTOCOL  str message                   bad frame; the server closes the connection
// The server answers each connection's requests in order, one at a time: while a GET or WAIT is
// pending it reads nothing more from that connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/comm/store.h"

namespace kiln {

struct StoreLimits {
  uint32_t max_key_bytes = 4096;
  uint32_t max_value_bytes = 64u << 20;
  // What the server holds (keys plus values): for each client, the keys it last wrote; and in
  // all. A SET or ADD past either bound gets an ERROR reply and stores nothing, so one client,
  // token or not, cannot exhaust the memory of the process that serves the store.
  uint64_t max_client_bytes = uint64_t{256} << 20;
  uint64_t max_store_bytes = uint64_t{1} << 30;
  // The largest frame body: one key and one value plus the fixed fields. The key list of a WAIT
  // or CHECK has to fit in it too.
  uint64_t max_frame_bytes() const { return uint64_t{max_key_bytes} + max_value_bytes + 64; }
};

enum class StoreOp : uint8_t { kHello = 1, kSet, kGet, kAdd, kWait, kCheck, kDelete };

inline constexpr uint32_t kStoreProtocolVersion = 1;

// One decoded request; the fields an op does not carry stay at their defaults.
struct StoreRequest {
  StoreOp op = StoreOp::kHello;
  uint32_t version = kStoreProtocolVersion;  // HELLO
  std::string token;                         // HELLO
  std::vector<std::string> keys;             // exactly one for SET, GET, ADD and DELETE
  Bytes value;                               // SET
  int64_t delta = 0;                         // ADD
  uint64_t timeout_ms = 0;                   // GET, WAIT
};

// Parses one request frame from the front of [data, data + size). Returns the bytes it took
// (length field included), or 0 when the buffer holds only the start of a frame. Throws
// kiln::Error for a frame over `limits` (decided from the length field alone, before anything is
// allocated), an unknown op, a bad HELLO magic, an over-long key, or a body that is truncated or
// has bytes left over. Pure: the server's only parser, and the fuzz target's entry point.
size_t parse_store_request(const uint8_t* data, size_t size, const StoreLimits& limits,
                           StoreRequest& out);

// The frame that parse_store_request reads back as `req`.
Bytes encode_store_request(const StoreRequest& req);

// Internals shared by tcp_store_server.cc and tcp_store.cc; nothing else should use them.
namespace store_detail {

using Clock = std::chrono::steady_clock;

enum class Status : uint8_t { kOk = 0, kTimeout, kError, kRejected, kProtocol };
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
  void reset();

 private:
  int fd_ = -1;
};

std::string errno_text(int err);

// now + d, saturating: a "wait forever" timeout must not overflow the clock.
Clock::time_point deadline_after(std::chrono::milliseconds d);

// Milliseconds left until `deadline`, rounded up, for poll(): -1 means never.
int poll_ms(Clock::time_point deadline);

// "host:port", or "[host]:port" for an IPv6 address.
std::string endpoint(const std::string& host, int port);

void set_nodelay(int fd);

inline uint64_t load_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
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

}  // namespace store_detail
}  // namespace kiln
