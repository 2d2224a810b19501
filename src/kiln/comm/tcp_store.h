// The TCP rendezvous store (torch's TCPStore): the node-0 agent serves it, every worker connects,
// and Gloo and NCCL (its unique id, nccl_rendezvous.h) bootstrap through it. The server holds the
// data and does the waiting, so a client blocked in get() or wait() costs one idle socket, not a
// polling loop.
//
// Every connection opens with HELLO carrying the per-job token: a stray process (another job on
// the same port, a port scanner) is turned away before it can read or write a key. Every frame's
// length is checked against StoreLimits before anything is allocated for it; a frame over the
// bound or malformed closes that connection and only that one.
//
// The wire protocol, its frame parser and its encoder are in store_protocol.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/comm/store.h"
#include "kiln/comm/store_protocol.h"

namespace kiln {

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
