#include "kiln/comm/auth_tcp/device.h"

#include <unistd.h>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/comm/auth_tcp/address.h"
#include "kiln/comm/auth_tcp/context.h"

namespace kiln::auth_tcp {

Device::Device(const gloo::transport::tcp::attr& resolved, std::string token, ListenerLimits limits)
    : token_(std::move(token)), limits_(limits) {
  listener_ = std::make_unique<Listener>(
      resolved.ai_addr, token_, limits_, [this](const Hello& h) { return check(h); },
      [this](const Hello& h, int fd, const std::string& peer) { deliver(h, fd, peer); });
}

Device::~Device() { listener_.reset(); }

std::string Device::str() const { return "auth-tcp " + sockaddr_text(listen_address()); }

std::shared_ptr<gloo::transport::Context> Device::createContext(int rank, int size) {
  return std::make_shared<Context>(shared_from_this(), rank, size);
}

uint64_t Device::add_context(Context* ctx, int rank, int size) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t id = next_id_++;
  contexts_[id] = Registered{ctx, rank, size};
  return id;
}

void Device::remove_context(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  contexts_.erase(id);
}

std::string Device::check(const Hello& h) {
  std::lock_guard<std::mutex> l(mu_);
  const auto it = contexts_.find(h.context_id);
  if (it == contexts_.end()) return fmt::format("no context {} on this device", h.context_id);
  const Registered& c = it->second;
  if (h.to_rank != static_cast<uint32_t>(c.rank) || h.from_rank >= static_cast<uint32_t>(c.size) ||
      h.from_rank <= h.to_rank) {
    return fmt::format("its hello (rank {} to rank {}) does not fit context {} (rank {} of {})",
                       h.from_rank, h.to_rank, h.context_id, c.rank, c.size);
  }
  return "";
}

void Device::deliver(const Hello& h, int fd, const std::string& peer) {
  std::lock_guard<std::mutex> l(mu_);
  const auto it = contexts_.find(h.context_id);
  if (it == contexts_.end() || !it->second.ctx->adopt(static_cast<int>(h.from_rank), fd, peer)) {
    KILN_LOG_WARN(
        "gloo auth: dropped an authenticated connection from {} (rank {}, context {}): "
        "that pair is gone or already connected",
        peer, h.from_rank, h.context_id);
    ::close(fd);
  }
}

std::shared_ptr<gloo::transport::Device> make_auth_device(
    const gloo::transport::tcp::attr& resolved, const std::string& token) {
  return std::make_shared<Device>(resolved, token);
}

}  // namespace kiln::auth_tcp
