// kernels/device/stream.h on a GPU: a CudaStream owns a cudaStream_t (non-blocking, so it never
// synchronises with the legacy default stream) and a CudaEvent a cudaEvent_t recorded on it
// (timing disabled, except for record_timed()). Communicators (NCCL, and Gloo staging device
// buffers) reach the native handle of a kiln::Stream through cuda_native_stream().
#pragma once

#include <cuda_runtime_api.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "kiln/kernels/device/stream.h"

namespace kiln {

class CudaEvent final : public Event {
 public:
  CudaEvent(cudaStream_t recorded_on, bool timed);  // records at once
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void synchronize() const override;
  // cudaEventElapsedTime; both events timed.
  double seconds_since(const Event& earlier) const override;
  cudaEvent_t native() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  bool timed_ = false;
};

class CudaStream final : public Stream {
 public:
  CudaStream();  // a new non-blocking stream on the current device
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  std::shared_ptr<Event> record() override;
  std::shared_ptr<Event> record_timed() override;
  // Events of other streams are CudaEvents (cudaStreamWaitEvent); a completed event of any
  // kind is waited for on the host.
  void wait(std::shared_ptr<const Event> e) override;
  // cudaLaunchHostFunc: the stream stops at this point until `blocking_wait` returns; a throw is
  // kept and rethrown by the next synchronize().
  void wait_for(std::function<void()> blocking_wait) override;
  void synchronize() override;
  cudaStream_t native() const { return stream_; }

 private:
  struct HostWait;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<std::mutex> error_mu_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::exception_ptr> error_ = std::make_shared<std::exception_ptr>();
};

// The cudaStream_t behind `s`; kiln::Error when `s` is not a CudaStream.
cudaStream_t cuda_native_stream(Stream& s);

}  // namespace kiln
