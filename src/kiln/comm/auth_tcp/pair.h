// One authenticated pair: the connection between this rank and one peer of a context. connect()
// either dials the peer's listener and runs the connector's handshake (the higher rank, retrying
// until the context's timeout: a listener may turn it away while it is busy rejecting a flood),
// or waits for the device's listener to hand over the peer's authenticated connection. Then a
// reader thread takes frames {slot, nbytes, payload} off the socket, straight into the posted
// receive that wants them or into the mailbox until one is posted, and a writer thread sends the
// queued sends in issue order, each completed once its bytes are written.
#pragma once

#include <gloo/transport/pair.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>

#include "kiln/comm/auth_tcp/address.h"

namespace kiln::auth_tcp {

class Context;
class UnboundBuffer;

struct SendOp {
  UnboundBuffer* buf = nullptr;
  uint64_t slot = 0;
  size_t offset = 0, nbytes = 0;
};

class Pair final : public gloo::transport::Pair {
 public:
  Pair(Context& ctx, int peer);
  ~Pair() override;

  const gloo::transport::Address& address() const override { return self_; }
  void connect(const std::vector<char>& bytes) override;
  // Shuts the connection down and joins the I/O threads; the context fails (pending
  // operations throw). Idempotent.
  void close() override;
  void setSync(bool, bool) override {}  // the I/O threads always progress on their own
  std::unique_ptr<gloo::transport::Buffer> createSendBuffer(int, void*, size_t) override;
  std::unique_ptr<gloo::transport::Buffer> createRecvBuffer(int, void*, size_t) override;
  void send(gloo::transport::UnboundBuffer* buf, uint64_t slot, size_t offset,
            size_t nbytes) override;
  void recv(gloo::transport::UnboundBuffer* buf, uint64_t slot, size_t offset,
            size_t nbytes) override;

  // With the context's lock held:
  // Takes an authenticated connection and starts the I/O threads; false when connected already.
  bool start_locked(int fd, const std::string& peer_text);
  void queue_send_locked(const SendOp& op);
  void drop_sends_locked(const UnboundBuffer* buf);
  // Makes blocked reads and writes return (the context failed); the threads then exit.
  void shutdown_locked();

 private:
  void connect_to(const PairAddress& peer);
  void wait_for_peer(std::chrono::steady_clock::time_point deadline);
  void read_loop();
  void write_loop();
  // The frame's payload into the receive that claims it, or into the mailbox; false on failure.
  bool take_frame(uint64_t slot, uint64_t nbytes);
  std::string who() const;

  Context& ctx_;
  const int peer_;
  Address self_;
  int fd_ = -1;  // set once, closed after the threads are joined
  std::string peer_text_;
  bool closing_ = false;
  std::deque<SendOp> sends_;
  std::condition_variable send_cv_;
  std::thread reader_, writer_;
};

}  // namespace kiln::auth_tcp
