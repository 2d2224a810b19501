#include "kiln/comm/auth_tcp/context.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <cstring>

#include "kiln/base/error.h"
#include "kiln/comm/auth_tcp/device.h"
#include "kiln/comm/auth_tcp/pair.h"
#include "kiln/comm/auth_tcp/unbound_buffer.h"

namespace kiln::auth_tcp {

Context::Context(std::shared_ptr<Device> device, int rank, int size)
    : gloo::transport::Context(rank, size), device_(std::move(device)) {
  pairs_.resize(size);
  closed_.assign(size, false);
  id_ = device_->add_context(this, rank, size);
}

Context::~Context() {
  device_->remove_context(id_);  // first: no connection is adopted from here on
  for (auto& p : pairs_) {
    if (p) p->close();
  }
  // The pairs' threads are joined; destroy them while the state they use still exists.
  pairs_.clear();
}

PairAddress Context::self_address() const {
  return PairAddress{device_->listen_address(), id_, static_cast<int32_t>(rank)};
}

std::unique_ptr<gloo::transport::Pair>& Context::createPair(int peer) {
  KILN_CHECK(peer >= 0 && peer < size && peer != rank, "auth_tcp: no pair from rank {} to {} of {}",
             rank, peer, size);
  std::lock_guard<std::mutex> l(mu_);
  KILN_CHECK(pairs_[peer] == nullptr, "auth_tcp: the pair to rank {} exists already", peer);
  pairs_[peer] = std::make_unique<Pair>(*this, peer);
  return pairs_[peer];
}

std::unique_ptr<gloo::transport::UnboundBuffer> Context::createUnboundBuffer(void* ptr,
                                                                             size_t size) {
  return std::make_unique<UnboundBuffer>(shared_from_this(), ptr, size);
}

bool Context::adopt(int peer, int fd, const std::string& peer_text) {
  std::lock_guard<std::mutex> l(mu_);
  if (!error_.empty() || peer < 0 || peer >= size || pairs_[peer] == nullptr) return false;
  auto& p = static_cast<Pair&>(*pairs_[peer]);
  if (!p.start_locked(fd, peer_text)) return false;
  connected_cv_.notify_all();
  return true;
}

Pair& Context::pair_locked(int peer) {
  if (peer < 0 || peer >= size || peer == rank || pairs_[peer] == nullptr) {
    throw gloo::InvalidOperationException(
        fmt::format("auth_tcp: rank {} of {} has no pair to rank {}", rank, size, peer));
  }
  return static_cast<Pair&>(*pairs_[peer]);
}

void Context::post_recv(UnboundBuffer* buf, std::vector<int> ranks, uint64_t slot, size_t offset,
                        size_t nbytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (!error_.empty()) throw_failed_locked();
  for (int r : ranks) pair_locked(r);
  if (std::optional<ArrivedMessage> m = mailbox_.take(slot, ranks)) {
    if (m->payload.size() != nbytes) {
      fail_locked(fmt::format("rank {} sent {} bytes on slot {:#x} to a receive of {} bytes",
                              m->rank, m->payload.size(), slot, nbytes));
      throw_failed_locked();
    }
    if (nbytes > 0)
      std::memcpy(static_cast<uint8_t*>(buf->ptr) + offset, m->payload.data(), nbytes);
    buf->complete_recv_locked(m->rank);
    return;
  }
  if (std::all_of(ranks.begin(), ranks.end(), [&](int r) { return closed_[r]; })) {
    fail_locked(fmt::format(
        "a receive on slot {:#x} waits for {} that closed the connection", slot,
        ranks.size() == 1 ? fmt::format("rank {}", ranks[0]) : std::string("ranks that all")));
    throw_failed_locked();
  }
  mailbox_.post(slot, PostedRecv{buf, offset, nbytes, std::move(ranks)});
}

void Context::peer_closed_locked(int peer) {
  closed_[peer] = true;
  if (mailbox_.stranded([&](int r) { return closed_[r]; })) {
    fail_locked(
        fmt::format("rank {} closed the connection while a receive from it was pending", peer));
  }
}

void Context::post_send(UnboundBuffer* buf, int peer, uint64_t slot, size_t offset, size_t nbytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (!error_.empty()) throw_failed_locked();
  pair_locked(peer).queue_send_locked(SendOp{buf, slot, offset, nbytes});
}

void Context::add_buffer(UnboundBuffer* buf) {
  std::lock_guard<std::mutex> l(mu_);
  buffers_.insert(buf);
}

void Context::remove_buffer(UnboundBuffer* buf) {
  std::unique_lock<std::mutex> l(mu_);
  mailbox_.forget(buf);
  for (auto& p : pairs_) {
    if (p) static_cast<Pair&>(*p).drop_sends_locked(buf);
  }
  if (buf->in_flight_locked()) {
    fail_locked("an unbound buffer was destroyed while its bytes were on the wire");
    buf->wait_idle_locked(l);
  }
  buffers_.erase(buf);
}

void Context::fail_locked(const std::string& why) {
  if (!error_.empty()) return;
  error_ = why;
  for (UnboundBuffer* b : buffers_) b->notify_locked();
  for (auto& p : pairs_) {
    if (p) static_cast<Pair&>(*p).shutdown_locked();
  }
  connected_cv_.notify_all();
}

void Context::throw_failed_locked() const {
  throw gloo::IoException(fmt::format("auth_tcp (rank {} of {}): {}", rank, size, error_));
}

}  // namespace kiln::auth_tcp
