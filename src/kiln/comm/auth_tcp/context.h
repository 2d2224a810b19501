// A group's state on an authenticated device: its pairs, the receives posted and messages not
// yet wanted (mailbox.h), the live unbound buffers and the first failure. One lock guards all of
// it; the pairs' I/O threads hold it only to match and complete, never while moving payload.
// After a failure (a peer closed its connection, a timeout, a protocol error) every waiting and
// later operation throws gloo::IoException with the failure's message, as Gloo's tcp transport
// does: the collectives cannot go on with a half-done exchange.
#pragma once

#include <gloo/transport/context.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kiln/comm/auth_tcp/address.h"
#include "kiln/comm/auth_tcp/mailbox.h"

namespace kiln::auth_tcp {

class Device;
class Pair;
class UnboundBuffer;

class Context final : public gloo::transport::Context,
                      public std::enable_shared_from_this<Context> {
 public:
  Context(std::shared_ptr<Device> device, int rank, int size);
  ~Context() override;

  std::unique_ptr<gloo::transport::Pair>& createPair(int rank) override;
  std::unique_ptr<gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr,
                                                                      size_t size) override;

  const Device& device() const { return *device_; }
  // The address this context's pairs publish.
  PairAddress self_address() const;

  // From the device's listener: an authenticated connection from `rank`. False (the caller
  // closes fd) when that pair does not exist or is connected already.
  bool adopt(int rank, int fd, const std::string& peer);

  // The data path, for buffers and pairs. Throw gloo::IoException once the context failed.
  void post_recv(UnboundBuffer* buf, std::vector<int> ranks, uint64_t slot, size_t offset,
                 size_t nbytes);
  void post_send(UnboundBuffer* buf, int rank, uint64_t slot, size_t offset, size_t nbytes);
  void add_buffer(UnboundBuffer* buf);
  // Drops what `buf` posted; waits for an I/O thread moving its bytes (failing the context
  // first, an operation abandoned mid-flight leaves the exchange undefined).
  void remove_buffer(UnboundBuffer* buf);

  // The lock and what it guards (the *_locked calls need it held).
  std::mutex& mu() { return mu_; }
  std::condition_variable& connected_cv() { return connected_cv_; }
  Mailbox& mailbox_locked() { return mailbox_; }
  const std::string& error_locked() const { return error_; }
  // Records the first failure, wakes every waiter and shuts every connection down.
  void fail_locked(const std::string& why);
  [[noreturn]] void throw_failed_locked() const;
  // `rank` closed its connection cleanly (at a frame boundary): what it sent still counts, but a
  // receive that only it could fill fails the context, now or when posted.
  void peer_closed_locked(int rank);
  Pair& pair_locked(int rank);

 private:
  std::shared_ptr<Device> device_;
  uint64_t id_ = 0;
  std::mutex mu_;
  std::condition_variable connected_cv_;
  Mailbox mailbox_;
  std::set<UnboundBuffer*> buffers_;
  std::string error_;
  std::vector<bool> closed_;  // per rank: its peer closed the connection
};

}  // namespace kiln::auth_tcp
