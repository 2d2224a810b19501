// Order on a device: streams and events. Work enqueued on one stream runs in issue order, some
// time after it is enqueued; an Event marks a point in a stream. The CPU backend runs everything
// at once on the calling thread (every event is already complete); the stream emulation
// (KILN_ASYNC_CPU=1) runs each stream on a worker thread of its own; CUDA maps them to
// cudaStream_t and cudaEvent_t.
#pragma once

#include <functional>
#include <memory>

namespace kiln {

class Event {
 public:
  virtual ~Event() = default;
  // Blocks the host until everything the stream had enqueued before record() has run.
  virtual void synchronize() const = 0;
  // Seconds from `earlier` to this event, both from record_timed() on the same stream and both
  // complete (synchronize() first). kiln::Error for events record() made.
  virtual double seconds_since(const Event& earlier) const;
};

class Stream {
 public:
  virtual ~Stream() = default;
  // Marks everything enqueued on this stream so far.
  virtual std::shared_ptr<Event> record() = 0;
  // The same, and the event keeps the time it completed at (for Event::seconds_since); costs
  // more than record() on a GPU, so only profiling asks for it.
  virtual std::shared_ptr<Event> record_timed() = 0;
  // Work enqueued on this stream after this call waits for `e` (recorded on any stream). The
  // host is not blocked.
  virtual void wait(std::shared_ptr<const Event> e) = 0;
  // Work enqueued after this call waits until `blocking_wait` (which blocks until host-side work
  // such as a Gloo collective is done, and throws if it failed) returns. The host is not blocked
  // (except by the synchronous backend, which runs it at once); an exception surfaces at the
  // next synchronize().
  virtual void wait_for(std::function<void()> blocking_wait) = 0;
  // Blocks the host until everything enqueued so far has run; rethrows the first failure.
  virtual void synchronize() = 0;
};

}  // namespace kiln
