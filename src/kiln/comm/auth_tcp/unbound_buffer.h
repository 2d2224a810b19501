// A chunk of user memory that sends and receives go through (gloo's UnboundBuffer): send and
// recv only post the operation; waitSend / waitRecv return once one posted operation completed
// (in completion order, naming its peer), false after abortWait*, and throw gloo::IoException
// when the context failed or the wait timed out (which fails the context, as in Gloo's tcp
// transport). Its counters are guarded by the context's lock.
#pragma once

#include <gloo/transport/unbound_buffer.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

namespace kiln::auth_tcp {

class Context;

class UnboundBuffer final : public gloo::transport::UnboundBuffer {
 public:
  UnboundBuffer(std::shared_ptr<Context> ctx, void* ptr, size_t size);
  ~UnboundBuffer() override;

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override;
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override;
  void abortWaitRecv() override;
  void abortWaitSend() override;
  void send(int dst, uint64_t slot, size_t offset, size_t nbytes) override;
  void recv(int src, uint64_t slot, size_t offset, size_t nbytes) override;
  void recv(std::vector<int> srcs, uint64_t slot, size_t offset, size_t nbytes) override;

  // For the context and its pairs, with the context's lock held.
  void complete_recv_locked(int rank);
  void complete_send_locked(int rank);
  void begin_io_locked() { ++in_flight_; }
  void end_io_locked();
  bool in_flight_locked() const { return in_flight_ > 0; }
  void wait_idle_locked(std::unique_lock<std::mutex>& l);
  void notify_locked() { cv_.notify_all(); }

 private:
  enum class Kind { kRecv, kSend };
  bool wait(Kind kind, int* rank, std::chrono::milliseconds timeout);
  size_t checked_bytes(size_t offset, size_t nbytes) const;

  std::shared_ptr<Context> ctx_;
  std::condition_variable cv_;
  std::deque<int> recvs_done_, sends_done_;  // the peer of each completed, not yet waited for
  bool abort_recv_ = false, abort_send_ = false;
  int in_flight_ = 0;  // I/O threads moving this buffer's bytes right now
};

}  // namespace kiln::auth_tcp
