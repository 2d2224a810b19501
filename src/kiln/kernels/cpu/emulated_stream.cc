#include "kiln/kernels/cpu/emulated_stream.h"

#include <chrono>

#include "kiln/kernels/cpu/host_event.h"

namespace kiln {

EmulatedStream::EmulatedStream(uint64_t seed) : rng_(seed), thread_([this] { run(); }) {}

EmulatedStream::~EmulatedStream() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EmulatedStream::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void EmulatedStream::run() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // One task in four starts up to 200 us late: later than the host's next few calls.
    if (rng_() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng_() % 200));
    try {
      task();
    } catch (...) {
      std::lock_guard<std::mutex> l(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

std::shared_ptr<Event> EmulatedStream::record() {
  auto e = std::make_shared<HostEvent>();
  enqueue([e] { e->set(); });
  return e;
}

std::shared_ptr<Event> EmulatedStream::record_timed() { return record(); }

void EmulatedStream::wait(std::shared_ptr<const Event> e) {
  enqueue([e = std::move(e)] { e->synchronize(); });
}

void EmulatedStream::wait_for(std::function<void()> blocking_wait) {
  enqueue(std::move(blocking_wait));
}

void EmulatedStream::synchronize() {
  record()->synchronize();
  std::lock_guard<std::mutex> l(mu_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace kiln
