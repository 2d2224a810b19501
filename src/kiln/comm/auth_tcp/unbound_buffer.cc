#include "kiln/comm/auth_tcp/unbound_buffer.h"

#include <gloo/common/error.h>

#include "kiln/base/error.h"
#include "kiln/comm/auth_tcp/context.h"

namespace kiln::auth_tcp {

UnboundBuffer::UnboundBuffer(std::shared_ptr<Context> ctx, void* ptr, size_t size)
    : gloo::transport::UnboundBuffer(ptr, size), ctx_(std::move(ctx)) {
  ctx_->add_buffer(this);
}

UnboundBuffer::~UnboundBuffer() { ctx_->remove_buffer(this); }

size_t UnboundBuffer::checked_bytes(size_t offset, size_t nbytes) const {
  if (nbytes == kUnspecifiedByteCount) nbytes = offset <= size ? size - offset : 0;
  if (offset > size || nbytes > size - offset) {
    throw gloo::InvalidOperationException(fmt::format(
        "auth_tcp: {} bytes at offset {} lie outside a buffer of {}", nbytes, offset, size));
  }
  return nbytes;
}

void UnboundBuffer::send(int dst, uint64_t slot, size_t offset, size_t nbytes) {
  ctx_->post_send(this, dst, slot, offset, checked_bytes(offset, nbytes));
}

void UnboundBuffer::recv(int src, uint64_t slot, size_t offset, size_t nbytes) {
  ctx_->post_recv(this, {src}, slot, offset, checked_bytes(offset, nbytes));
}

void UnboundBuffer::recv(std::vector<int> srcs, uint64_t slot, size_t offset, size_t nbytes) {
  KILN_CHECK(!srcs.empty(), "auth_tcp: a receive from an empty set of ranks");
  ctx_->post_recv(this, std::move(srcs), slot, offset, checked_bytes(offset, nbytes));
}

bool UnboundBuffer::waitRecv(int* rank, std::chrono::milliseconds timeout) {
  return wait(Kind::kRecv, rank, timeout);
}

bool UnboundBuffer::waitSend(int* rank, std::chrono::milliseconds timeout) {
  return wait(Kind::kSend, rank, timeout);
}

bool UnboundBuffer::wait(Kind kind, int* rank, std::chrono::milliseconds timeout) {
  if (timeout == gloo::transport::kUnsetTimeout) timeout = ctx_->getTimeout();
  std::deque<int>& done = kind == Kind::kRecv ? recvs_done_ : sends_done_;
  bool& aborted = kind == Kind::kRecv ? abort_recv_ : abort_send_;
  std::unique_lock<std::mutex> l(ctx_->mu());
  const bool woke = cv_.wait_for(
      l, timeout, [&] { return !done.empty() || aborted || !ctx_->error_locked().empty(); });
  if (!done.empty()) {
    if (rank != nullptr) *rank = done.front();
    done.pop_front();
    return true;
  }
  if (aborted) {
    aborted = false;
    return false;
  }
  if (!woke) {
    ctx_->fail_locked(fmt::format("timed out after {} ms waiting for a {} to complete",
                                  timeout.count(), kind == Kind::kRecv ? "receive" : "send"));
  }
  ctx_->throw_failed_locked();
}

void UnboundBuffer::abortWaitRecv() {
  std::lock_guard<std::mutex> l(ctx_->mu());
  abort_recv_ = true;
  cv_.notify_all();
}

void UnboundBuffer::abortWaitSend() {
  std::lock_guard<std::mutex> l(ctx_->mu());
  abort_send_ = true;
  cv_.notify_all();
}

void UnboundBuffer::complete_recv_locked(int rank) {
  recvs_done_.push_back(rank);
  cv_.notify_all();
}

void UnboundBuffer::complete_send_locked(int rank) {
  sends_done_.push_back(rank);
  cv_.notify_all();
}

void UnboundBuffer::end_io_locked() {
  --in_flight_;
  cv_.notify_all();
}

void UnboundBuffer::wait_idle_locked(std::unique_lock<std::mutex>& l) {
  cv_.wait(l, [&] { return in_flight_ == 0; });
}

}  // namespace kiln::auth_tcp
