#include "kiln/kernels/cpu/host_event.h"

#include "kiln/base/error.h"

namespace kiln {

void HostEvent::set() {
  {
    std::lock_guard<std::mutex> l(mu_);
    at_ = std::chrono::steady_clock::now();
    done_ = true;
  }
  cv_.notify_all();
}

void HostEvent::synchronize() const {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return done_; });
}

double HostEvent::seconds_since(const Event& earlier) const {
  const auto* e = dynamic_cast<const HostEvent*>(&earlier);
  KILN_CHECK(e != nullptr, "HostEvent::seconds_since: the earlier event is of another stream kind");
  synchronize();
  e->synchronize();
  return std::chrono::duration<double>(at_ - e->at_).count();
}

}  // namespace kiln
