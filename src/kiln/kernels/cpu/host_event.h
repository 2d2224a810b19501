// A point in a stream the host runs (the synchronous CPU stream and the stream emulation):
// complete once set(), keeping the steady-clock time it was set at for Event::seconds_since.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "kiln/kernels/device/stream.h"

namespace kiln {

class HostEvent final : public Event {
 public:
  void set();
  void synchronize() const override;
  // `earlier` must be a HostEvent too.
  double seconds_since(const Event& earlier) const override;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::chrono::steady_clock::time_point at_;
};

}  // namespace kiln
