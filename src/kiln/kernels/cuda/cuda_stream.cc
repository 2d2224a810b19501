#include "kiln/kernels/cuda/cuda_stream.h"

#include <fmt/format.h>

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cuda_check.h"

namespace kiln {

void cuda_failed(cudaError_t e, const char* call, const char* file, int line) {
  fail("CUDA: {} failed: {} ({}) at {}:{}", call, cudaGetErrorString(e), cudaGetErrorName(e), file,
       line);
}

CudaEvent::CudaEvent(cudaStream_t recorded_on, bool timed) : timed_(timed) {
  KILN_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timed ? cudaEventDefault : cudaEventDisableTiming));
  KILN_CUDA_CHECK(cudaEventRecord(event_, recorded_on));
}

CudaEvent::~CudaEvent() { cudaEventDestroy(event_); }

void CudaEvent::synchronize() const { KILN_CUDA_CHECK(cudaEventSynchronize(event_)); }

double CudaEvent::seconds_since(const Event& earlier) const {
  const auto* e = dynamic_cast<const CudaEvent*>(&earlier);
  KILN_CHECK(e != nullptr && e->timed_ && timed_,
             "CudaEvent::seconds_since: both events must come from record_timed()");
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, e->event_, event_));
  return ms / 1e3;
}

CudaStream::CudaStream() {
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

std::shared_ptr<Event> CudaStream::record() { return std::make_shared<CudaEvent>(stream_, false); }

std::shared_ptr<Event> CudaStream::record_timed() {
  return std::make_shared<CudaEvent>(stream_, true);
}

void CudaStream::wait(std::shared_ptr<const Event> e) {
  if (const auto* ce = dynamic_cast<const CudaEvent*>(e.get())) {
    KILN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ce->native(), 0));
    return;
  }
  e->synchronize();  // a host-side event (the CPU's are complete when recorded)
}

// What a host function enqueued by wait_for() needs: the wait, and where its failure goes.
struct CudaStream::HostWait {
  std::function<void()> blocking_wait;
  std::shared_ptr<std::mutex> error_mu;
  std::shared_ptr<std::exception_ptr> error;
};

void CudaStream::wait_for(std::function<void()> blocking_wait) {
  auto* w = new HostWait{std::move(blocking_wait), error_mu_, error_};
  const auto run = [](void* p) {
    std::unique_ptr<HostWait> wait(static_cast<HostWait*>(p));
    try {
      wait->blocking_wait();
    } catch (...) {
      std::lock_guard lock(*wait->error_mu);
      if (!*wait->error) *wait->error = std::current_exception();
    }
  };
  const cudaError_t e = cudaLaunchHostFunc(stream_, run, w);
  if (e != cudaSuccess) {
    delete w;
    cuda_failed(e, "cudaLaunchHostFunc", __FILE__, __LINE__);
  }
}

void CudaStream::synchronize() {
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::exception_ptr first;
  {
    std::lock_guard lock(*error_mu_);
    std::swap(first, *error_);
  }
  if (first) std::rethrow_exception(first);
}

cudaStream_t cuda_native_stream(Stream& s) {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  if (cs == nullptr) fail("CUDA: a communicator was given a stream of another backend");
  return cs->native();
}

}  // namespace kiln
