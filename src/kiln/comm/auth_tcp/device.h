// kiln's authenticated Gloo transport (the "gloo-tcp+auth" transport): a gloo::transport::Device
// whose pairs connect over TCP like Gloo's own tcp transport, but every connection must first
// pass a mutual HMAC-SHA256 handshake keyed by the job's token (handshake.h). A stray or hostile
// connection to a listener is rejected with a warning and never fails the group. One listening
// socket per device, on an ephemeral port of the address Gloo's tcp attributes resolved; the
// higher rank of each pair connects, the lower one's listener routes the authenticated
// connection to its pair (context id and ranks from the hello). Serves the unbound-buffer API
// (gloo::allreduce, allgather, broadcast, barrier, kiln's ring); the old bound Buffer API throws.
#pragma once

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/attr.h>
#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/comm/auth_tcp/listener.h"

namespace kiln::auth_tcp {

class Context;

class Device final : public gloo::transport::Device, public std::enable_shared_from_this<Device> {
 public:
  // Listens on `resolved.ai_addr` (port ephemeral). `token`: the job's secret, non-empty.
  Device(const gloo::transport::tcp::attr& resolved, std::string token, ListenerLimits limits = {});
  ~Device() override;

  std::string str() const override;
  const std::string& getPCIBusID() const override { return bus_id_; }
  std::shared_ptr<gloo::transport::Context> createContext(int rank, int size) override;

  // The listening socket's address (tests connect to it).
  const sockaddr_storage& listen_address() const { return listener_->address(); }
  const std::string& token() const { return token_; }
  const ListenerLimits& limits() const { return limits_; }

  // For Context: registers a context for incoming connections; returns its id.
  uint64_t add_context(Context* ctx, int rank, int size);
  void remove_context(uint64_t id);

 private:
  struct Registered {
    Context* ctx;
    int rank, size;
  };
  std::string check(const Hello& h);
  void deliver(const Hello& h, int fd, const std::string& peer);

  std::string token_;
  ListenerLimits limits_;
  std::string bus_id_;
  std::mutex mu_;
  std::map<uint64_t, Registered> contexts_;
  uint64_t next_id_ = 1;
  std::unique_ptr<Listener> listener_;  // last: its thread uses the members above
};

std::shared_ptr<gloo::transport::Device> make_auth_device(
    const gloo::transport::tcp::attr& resolved, const std::string& token);

}  // namespace kiln::auth_tcp
