// The TCP rendezvous store (torch's TCPStore): the node-0 agent serves it, every worker connects,
// and Gloo (later NCCL's unique id) bootstraps through it. The server holds the data and does the
// waiting, so a client blocked in get() or wait() costs one idle socket, not a polling loop.
//
// Every connection opens with HELLO carrying the per-job token: a stray process (another job on
// the same port, a port scanner) is turned away before it can read or write a key. Every frame's
// length is checked against StoreLimits before anything is allocated for it; a frame over the
// bound or malformed closes that connection and only that one.
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
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/dist/store.h"

namespace kiln {

struct StoreLimits {
  uint32_t max_key_bytes = 4096;
  uint32_t max_value_bytes = 64u << 20;
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

class TcpStoreServer {
 public:
  // Listens on host:port ("" or "0.0.0.0": every interface; port 0: a free port, see port())
  // and serves on a background thread until destroyed. Throws kiln::Error if it cannot listen.
  TcpStoreServer(const std::string& host, int port, std::string token, StoreLimits limits = {});
  // Stops the thread and closes every connection; clients still waiting get a closed-connection
  // error.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  // How long a request may take on the network beyond its own wait (GET, WAIT): a server that
  // stops answering becomes an error after this long instead of a hang.
  std::chrono::milliseconds io_timeout{std::chrono::minutes(5)};
  // Checked before sending, so an oversized key or value is a clear error here rather than a
  // dropped connection. Keep them no larger than the server's.
  StoreLimits limits;
};

// Client. Thread-safe: requests from several threads take turns on the one connection. After a
// network failure or a frame the server rejected, the connection is closed and every later
// request fails naming the first error; errors name host:port, the operation and the keys.
class TcpStore final : public Store {
 public:
  // Connects and presents the token, retrying refused or unresolvable connections until
  // connect_timeout (the server may start later). Throws kiln::Error on timeout or a wrong token
  // ("store: connection rejected by host:port (wrong job token)").
  TcpStore(std::string host, int port, std::string token, std::chrono::milliseconds connect_timeout,
           TcpStoreOptions options = {});
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  // Deletes `key`; true if it existed.
  bool remove(const std::string& key);

  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  struct Conn;
  // Sends `req` and returns the payload of its OK response; `wait` is how long the server may
  // hold it (GET, WAIT) before the network deadline starts.
  Bytes request(const char* op, const StoreRequest& req, std::chrono::milliseconds wait);

  std::string host_;
  int port_;
  std::string endpoint_;  // "host:port", for messages
  TcpStoreOptions options_;
  std::mutex mu_;
  std::unique_ptr<Conn> conn_;
};

}  // namespace kiln
