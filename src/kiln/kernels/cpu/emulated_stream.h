// A stream emulated on the CPU (KILN_ASYNC_CPU=1): one worker thread runs the stream's tasks in
// issue order, each after a small random delay, so work really happens some time after it is
// enqueued. Events really order streams, and a host read that skips its wait sees stale data:
// the tests of the backend seam run under it to catch a missing wait without a GPU.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "kiln/kernels/device/stream.h"

namespace kiln {

class EmulatedStream final : public Stream {
 public:
  explicit EmulatedStream(uint64_t seed);
  ~EmulatedStream() override;  // runs what is still queued, then stops
  EmulatedStream(const EmulatedStream&) = delete;
  EmulatedStream& operator=(const EmulatedStream&) = delete;

  // Runs `task` on the stream's thread after everything enqueued before it.
  void enqueue(std::function<void()> task);

  std::shared_ptr<Event> record() override;
  std::shared_ptr<Event> record_timed() override;  // every event keeps its time
  void wait(std::shared_ptr<const Event> e) override;
  void wait_for(std::function<void()> blocking_wait) override;
  void synchronize() override;

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::exception_ptr error_;  // the first task that threw; later tasks still run
  std::mt19937_64 rng_;       // delays, used on the stream's thread only
  std::thread thread_;
};

}  // namespace kiln
