#include "kiln/comm/auth_tcp/pair.h"

#include <gloo/common/error.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "kiln/base/error.h"
#include "kiln/comm/auth_tcp/context.h"
#include "kiln/comm/auth_tcp/device.h"
#include "kiln/comm/auth_tcp/handshake.h"
#include "kiln/comm/auth_tcp/socket_io.h"
#include "kiln/comm/auth_tcp/unbound_buffer.h"

namespace kiln::auth_tcp {

namespace {

struct FrameHeader {
  uint64_t slot;
  uint64_t nbytes;
};

using std::chrono::milliseconds;

milliseconds until(Clock::time_point deadline) {
  return std::max(milliseconds(1),
                  std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

}  // namespace

Pair::Pair(Context& ctx, int peer) : ctx_(ctx), peer_(peer), self_(ctx.self_address()) {}

Pair::~Pair() { close(); }

std::string Pair::who() const {
  return fmt::format("rank {}{}", peer_, peer_text_.empty() ? "" : " (" + peer_text_ + ")");
}

void Pair::connect(const std::vector<char>& bytes) {
  const PairAddress peer = decode_address(bytes);
  KILN_CHECK(peer.rank == peer_, "auth_tcp: rank {} got the address of rank {} for its pair to {}",
             ctx_.rank, peer.rank, peer_);
  if (ctx_.rank > peer_) {
    connect_to(peer);
  } else {
    wait_for_peer(Clock::now() + ctx_.getTimeout());
  }
}

void Pair::connect_to(const PairAddress& peer) {
  const auto deadline = Clock::now() + ctx_.getTimeout();
  const std::string where = sockaddr_text(peer.listener);
  std::string last;
  while (true) {
    const int fd = connect_until(peer.listener, deadline, &last);
    if (fd < 0) break;
    set_io_timeout(fd, std::min(until(deadline), ctx_.device().limits().handshake_deadline));
    const Hello hello{peer.context_id, static_cast<uint32_t>(ctx_.rank),
                      static_cast<uint32_t>(peer_), random_nonce()};
    last = connector_handshake(fd, ctx_.device().token(), hello);
    if (last.empty()) {
      set_io_timeout(fd, milliseconds(0));
      std::lock_guard<std::mutex> l(ctx_.mu());
      if (ctx_.error_locked().empty() && !closing_ && start_locked(fd, where)) return;
      ::close(fd);
      ctx_.throw_failed_locked();
    }
    ::close(fd);
    if (Clock::now() + milliseconds(100) >= deadline) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  throw gloo::IoException(
      fmt::format("auth_tcp: rank {} could not connect to rank {} at {} within {} ms: {}",
                  ctx_.rank, peer_, where, ctx_.getTimeout().count(), last));
}

void Pair::wait_for_peer(Clock::time_point deadline) {
  std::unique_lock<std::mutex> l(ctx_.mu());
  ctx_.connected_cv().wait_until(
      l, deadline, [&] { return fd_ >= 0 || closing_ || !ctx_.error_locked().empty(); });
  if (fd_ >= 0) return;
  if (!ctx_.error_locked().empty()) ctx_.throw_failed_locked();
  throw gloo::IoException(fmt::format(
      "auth_tcp: rank {} waited {} ms for rank {} to connect to {} and authenticate; no "
      "connection holding this job's token arrived",
      ctx_.rank, ctx_.getTimeout().count(), peer_, sockaddr_text(self_.value().listener)));
}

bool Pair::start_locked(int fd, const std::string& peer_text) {
  if (fd_ >= 0 || closing_) return false;
  fd_ = fd;
  peer_text_ = peer_text;
  set_no_delay(fd_);
  reader_ = std::thread([this] { read_loop(); });
  writer_ = std::thread([this] { write_loop(); });
  return true;
}

void Pair::close() {
  {
    std::lock_guard<std::mutex> l(ctx_.mu());
    if (!closing_) {
      closing_ = true;
      ctx_.fail_locked(fmt::format("the pair with {} was closed", who()));
    }
    shutdown_locked();
  }
  if (reader_.joinable()) reader_.join();
  if (writer_.joinable()) writer_.join();
  std::lock_guard<std::mutex> l(ctx_.mu());
  if (fd_ >= 0) ::close(fd_);
  fd_ = -2;  // closed: never connects again
}

void Pair::shutdown_locked() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  send_cv_.notify_all();
}

void Pair::queue_send_locked(const SendOp& op) {
  if (fd_ < 0) {
    throw gloo::InvalidOperationException(fmt::format(
        "auth_tcp: rank {} sends to {} before the pair is connected", ctx_.rank, who()));
  }
  sends_.push_back(op);
  send_cv_.notify_all();
}

void Pair::drop_sends_locked(const UnboundBuffer* buf) {
  sends_.erase(
      std::remove_if(sends_.begin(), sends_.end(), [&](const SendOp& s) { return s.buf == buf; }),
      sends_.end());
}

void Pair::write_loop() {
  std::unique_lock<std::mutex> l(ctx_.mu());
  while (true) {
    send_cv_.wait(l, [&] { return closing_ || !sends_.empty() || !ctx_.error_locked().empty(); });
    if (closing_ || !ctx_.error_locked().empty()) return;
    const SendOp op = sends_.front();
    sends_.pop_front();
    op.buf->begin_io_locked();
    l.unlock();
    const FrameHeader h{op.slot, op.nbytes};
    const bool ok = write_full(fd_, &h, sizeof h, op.nbytes > 0) &&
                    write_full(fd_, static_cast<uint8_t*>(op.buf->ptr) + op.offset, op.nbytes);
    const int err = errno;
    l.lock();
    op.buf->end_io_locked();
    if (!ok) {
      ctx_.fail_locked(fmt::format("sending to {} failed: {}", who(), io_error_text(err)));
      return;
    }
    op.buf->complete_send_locked(peer_);
  }
}

void Pair::read_loop() {
  while (true) {
    FrameHeader h{};
    const bool ok = read_full(fd_, &h, sizeof h);
    const int err = errno;
    if (!ok) {
      std::lock_guard<std::mutex> l(ctx_.mu());
      if (err == 0 && !closing_) {
        ctx_.peer_closed_locked(peer_);  // a close between frames: what it sent still counts
      } else {
        ctx_.fail_locked(fmt::format("the connection to {} failed: {}", who(), io_error_text(err)));
      }
      return;
    }
    if (!take_frame(h.slot, h.nbytes)) return;
  }
}

bool Pair::take_frame(uint64_t slot, uint64_t nbytes) {
  std::unique_lock<std::mutex> l(ctx_.mu());
  std::optional<PostedRecv> r = ctx_.mailbox_locked().claim(slot, peer_);
  auto size_matches = [&](const PostedRecv& p) {
    if (p.nbytes == nbytes) return true;
    ctx_.fail_locked(fmt::format("{} sent {} bytes on slot {:#x} to a receive of {} bytes", who(),
                                 nbytes, slot, p.nbytes));
    return false;
  };
  if (r) {
    if (!size_matches(*r)) return false;
    r->buf->begin_io_locked();
    l.unlock();
    const bool ok = read_full(fd_, static_cast<uint8_t*>(r->buf->ptr) + r->offset, nbytes);
    const int err = errno;
    l.lock();
    r->buf->end_io_locked();
    if (!ok) {
      ctx_.fail_locked(fmt::format("reading from {} failed: {}", who(), io_error_text(err)));
      return false;
    }
    r->buf->complete_recv_locked(peer_);
    return true;
  }
  // Nobody wants it yet: keep it until a receive is posted (checking again once it is read).
  l.unlock();
  ArrivedMessage m{peer_, {}};
  bool ok = false;
  int err = 0;
  try {
    m.payload.resize(nbytes);
    ok = read_full(fd_, m.payload.data(), nbytes);
    err = errno;
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
  }
  l.lock();
  if (!ok) {
    ctx_.fail_locked(fmt::format("reading from {} failed: {}", who(), io_error_text(err)));
    return false;
  }
  r = ctx_.mailbox_locked().claim(slot, peer_);
  if (!r) {
    ctx_.mailbox_locked().hold(slot, std::move(m));
    return true;
  }
  if (!size_matches(*r)) return false;
  if (nbytes > 0)
    std::memcpy(static_cast<uint8_t*>(r->buf->ptr) + r->offset, m.payload.data(), nbytes);
  r->buf->complete_recv_locked(peer_);
  return true;
}

std::unique_ptr<gloo::transport::Buffer> Pair::createSendBuffer(int, void*, size_t) {
  throw gloo::InvalidOperationException(
      "auth_tcp: the bound Buffer API is not supported; use unbound buffers");
}

std::unique_ptr<gloo::transport::Buffer> Pair::createRecvBuffer(int, void*, size_t) {
  throw gloo::InvalidOperationException(
      "auth_tcp: the bound Buffer API is not supported; use unbound buffers");
}

void Pair::send(gloo::transport::UnboundBuffer* buf, uint64_t slot, size_t offset, size_t nbytes) {
  buf->send(peer_, slot, offset, nbytes);
}

void Pair::recv(gloo::transport::UnboundBuffer* buf, uint64_t slot, size_t offset, size_t nbytes) {
  buf->recv(peer_, slot, offset, nbytes);
}

}  // namespace kiln::auth_tcp
