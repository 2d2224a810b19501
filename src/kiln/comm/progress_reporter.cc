#include "kiln/comm/progress_reporter.h"

namespace kiln {

ProgressReporter::ProgressReporter(std::shared_ptr<Store> store, std::string key)
    : store_(std::move(store)), key_(std::move(key)) {
  publish(0);
  thread_ = std::thread([this] { run(); });
}

ProgressReporter::~ProgressReporter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // A rank that leaves shows the last operation it entered, not a throttled older one.
  publish(latest_);
}

void ProgressReporter::entered(int64_t seq) {
  {
    std::lock_guard<std::mutex> l(mu_);
    latest_ = seq;
  }
  cv_.notify_all();
}

void ProgressReporter::publish(int64_t seq) {
  std::lock_guard<std::mutex> l(publish_mu_);
  if (seq < published_) return;
  try {
    store_->set(key_, to_bytes(std::to_string(seq)));
    published_ = seq;
  } catch (const std::exception&) {
    // Progress only feeds diagnostics; an unreachable store surfaces in the collective itself.
  }
}

void ProgressReporter::run() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> l(mu_);
  Clock::time_point last{};
  int64_t sent = 0;
  while (true) {
    cv_.wait(l, [&] { return stop_ || latest_ != sent; });
    if (stop_) return;
    if (cv_.wait_until(l, last + kProgressInterval, [&] { return stop_; })) return;
    sent = latest_;
    l.unlock();
    publish(sent);
    l.lock();
    last = Clock::now();
  }
}

}  // namespace kiln
