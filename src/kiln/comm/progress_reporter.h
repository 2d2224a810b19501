// Where a rank is in a group's sequence of operations, for failure diagnosis: publishes
// "<group>/progress/<rank>" = the sequence number of the operation this rank last entered, from a
// thread of its own so that a rank blocked inside a collective still shows where it is within
// kProgressInterval. The Gloo and NCCL communicators publish it; their failure messages and the
// hang watchdog (watchdog.h) read it to name the ranks that never arrived.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kiln/comm/store.h"

namespace kiln {

// Progress is published at most this often: a store round trip per collective would cost more
// than a small collective, and a stale-by-100-ms view is plenty to tell who never arrived.
inline constexpr std::chrono::milliseconds kProgressInterval{100};

class ProgressReporter {
 public:
  // key: "progress/<rank>" in the group's namespace; publishes 0 at once.
  ProgressReporter(std::shared_ptr<Store> store, std::string key);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;
  // This rank entered operation `seq`; published within kProgressInterval.
  void entered(int64_t seq);
  // Synchronous, monotonic: never overwrites a newer value with an older one.
  void publish(int64_t seq);

 private:
  void run();

  std::shared_ptr<Store> store_;
  std::string key_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t latest_ = 0;
  bool stop_ = false;
  std::mutex publish_mu_;
  int64_t published_ = -1;
  std::thread thread_;
};

}  // namespace kiln
