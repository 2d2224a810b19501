// The stream emulation of the CPU backend (KILN_ASYNC_CPU=1): work runs some time after it is
// enqueued, so a host read that skips its wait sees stale data, and events really order
// streams. Each test holds the compute stream on a latch it controls, so "later" is certain
// rather than likely.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/kernels/cpu/async_cpu_backend.h"
#include "kiln/kernels/device/device_buffer.h"

namespace kiln {
namespace {

// Blocks a stream until release(): everything enqueued after hold() waits.
class Latch {
 public:
  void hold(Stream& s) {
    s.wait_for([f = open_.get_future().share()] { f.wait(); });
  }
  void release() { open_.set_value(); }

 private:
  std::promise<void> open_;
};

// The squared norm of x (device), read back to the host: the pattern of a training step's one
// read. `wait_before_read` false puts the wait after the read (the bug the emulation catches).
double read_sum_squares(const Backend& be, const float* x, size_t n, double* dev, Latch& latch,
                        bool wait_before_read) {
  double host = -1;
  latch.hold(be.compute_stream());
  be.fill_zero(dev, sizeof(double));
  be.sum_squares(dev, x, n);
  be.copy_to_host(&host, dev, sizeof host);
  if (wait_before_read) {
    latch.release();
    be.synchronize();
  }
  const double seen = host;
  if (!wait_before_read) {
    latch.release();
    be.synchronize();
  }
  return seen;
}

TEST(AsyncCpu, HostReadWithoutWaitSeesStaleDataAndTheWaitFixesIt) {
  const auto be = make_async_cpu_backend(false);
  DeviceBuffer<float> x(*be, 4);
  const std::vector<float> src = {1, 2, 3, 4};
  be->copy_to_device(x.data(), src.data(), 4 * sizeof(float));
  be->synchronize();
  Latch latch;
  latch.hold(be->compute_stream());
  be->scale(x.data(), 2.0f, 4);
  std::vector<float> h(4, -1.0f);
  be->copy_to_host(h.data(), x.data(), 4 * sizeof(float));
  EXPECT_EQ(h, std::vector<float>(4, -1.0f)) << "the copy ran before its stream reached it";
  latch.release();
  be->synchronize();
  EXPECT_EQ(h, (std::vector<float>{2, 4, 6, 8}));
}

TEST(AsyncCpu, AMisplacedWaitIsCaught) {
  const auto be = make_async_cpu_backend(false);
  DeviceBuffer<float> x(*be, 1000);
  std::vector<float> src(1000, 0.5f);
  be->copy_to_device(x.data(), src.data(), src.size() * sizeof(float));
  DeviceBuffer<double> dev(*be, 1);
  Latch right, wrong;
  EXPECT_EQ(read_sum_squares(*be, x.data(), 1000, dev.data(), right, true), 250.0);
  // With the wait after the read the value read is the stale one.
  EXPECT_EQ(read_sum_squares(*be, x.data(), 1000, dev.data(), wrong, false), -1.0);
}

TEST(AsyncCpu, EventsOrderStreams) {
  const auto be = make_async_cpu_backend(false);
  DeviceBuffer<float> x(*be, 1);
  be->synchronize();
  const auto other = be->create_stream();
  Latch latch;
  latch.hold(be->compute_stream());
  const float one = 1.0f;
  be->copy_to_device(x.data(), &one, sizeof one);
  const auto ready = be->compute_stream().record();
  float ordered = -1, unordered = -1;
  other->wait_for([&] { unordered = x.data()[0]; });  // no event: runs while compute is held
  other->synchronize();
  other->wait(ready);
  other->wait_for([&] { ordered = x.data()[0]; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ordered, -1.0f) << "the other stream ran past an event not yet reached";
  latch.release();
  other->synchronize();
  EXPECT_EQ(unordered, 0.0f);
  EXPECT_EQ(ordered, 1.0f);
}

TEST(AsyncCpu, AFailureSurfacesAtTheNextSynchronize) {
  const auto be = make_async_cpu_backend(false);
  be->compute_stream().wait_for([] { throw Error("collective failed"); });
  EXPECT_THROW(be->synchronize(), Error);
  be->synchronize();  // reported once
}

}  // namespace
}  // namespace kiln
