// The communicator: collectives over a group of workers. Implementations: local (world size 1,
// every collective is a copy or nothing), Gloo (CPU: TCP, kiln's authenticated TCP, or the
// same-host shared memory lane; gloo_communicator.h), NCCL (GPU, CUDA builds) and the null
// communicator the memory plan runs FSDP through (null_communicator.h). Its users (the trainer,
// FSDP, and the model's uses of a table split over a shard group: model/sharded_table.h,
// model/vocab_parallel_loss.h) only ever talk to this interface.
//
// Ordering contract: every rank of a group issues the same collectives in the same order.
// Asynchronous operations run in issue order on the group's own stream (Gloo: its communication
// thread).
//
// Device buffers and streams (the backend seam, kernels/device/stream.h): an operation given a
// stream `after` starts only once everything enqueued on `after` before the call has run (the op
// that produced its input): the communicator records an event there and waits on it. `after` null:
// the buffers are host memory, ready now. Work::wait(stream) orders a stream after the
// operation (work enqueued on that stream later runs after it) and does not block the host;
// Work::wait_host() blocks the host until the operation is done. Either way a failure is
// rethrown (by wait_host, or by the stream's next synchronize) as kiln::Error.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kiln/comm/transport_info.h"
#include "kiln/kernels/device/stream.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

enum class ReduceOp { kSum, kMean, kMax };

class Work {
 public:
  virtual ~Work() = default;
  // Work enqueued on `stream` after this call runs after the operation; the host is not blocked.
  virtual void wait(Stream& stream) = 0;
  // Blocks the host until the operation is done; rethrows its failure.
  virtual void wait_host() = 0;
};

// An operation that was done when it returned (one rank's copy, a communicator that moves
// nothing).
class DoneWork final : public Work {
 public:
  void wait(Stream&) override {}
  void wait_host() override {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The transport actually in use, as this group knows it (transport_info.h): what
  // dist.require_transport checks and run metadata records.
  virtual TransportInfo transport_info() const = 0;
  // Its one text ("local", "gloo-tcp eth0 10.0.0.2", ...), for logs and run_meta.json.
  std::string transport() const { return transport_text(transport_info()); }

  // data (n) reduced in place over the group.
  virtual std::unique_ptr<Work> all_reduce_async(void* data, size_t n, DType t, ReduceOp op,
                                                 Stream* after) = 0;
  // out (world * n) = concat over ranks of in (n). `in` may alias out + rank * n.
  virtual std::unique_ptr<Work> all_gather_async(void* out, const void* in, size_t n, DType t,
                                                 Stream* after) = 0;
  // out (n) = reduce over ranks of in[rank * n, (rank + 1) * n); in: (world * n).
  virtual std::unique_ptr<Work> reduce_scatter_async(void* out, const void* in, size_t n, DType t,
                                                     ReduceOp op, Stream* after) = 0;
  virtual std::unique_ptr<Work> broadcast_async(void* data, size_t n, DType t, int root,
                                                Stream* after) = 0;
  // Double-precision all-reduce of a few scalars in (device) memory: the gradient norm.
  virtual std::unique_ptr<Work> all_reduce_f64_async(double* data, size_t n, ReduceOp op,
                                                     Stream* after) = 0;
  virtual void barrier() = 0;
  // Double-precision all-reduce of a few host scalars (loss sums, counts); blocks the host.
  virtual void all_reduce(double* data, size_t n, ReduceOp op) = 0;

  // A sub-group of this group's `ranks` (ascending, containing rank()). Every rank of this
  // group calls split() the same number of times in the same order, each with the group it
  // belongs to; `name` distinguishes the groups of one call ("intra", "inter").
  virtual std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                              const std::string& name) = 0;

  // Synchronous forms over host buffers.
  void all_reduce(float* data, size_t n, ReduceOp op) {
    all_reduce_async(data, n, DType::F32, op, nullptr)->wait_host();
  }
  void all_gather(float* out, const float* in, size_t n) {
    all_gather_async(out, in, n, DType::F32, nullptr)->wait_host();
  }
  void reduce_scatter(float* out, const float* in, size_t n, ReduceOp op) {
    reduce_scatter_async(out, in, n, DType::F32, op, nullptr)->wait_host();
  }
  void broadcast(float* data, size_t n, int root) {
    broadcast_async(data, n, DType::F32, root, nullptr)->wait_host();
  }
};

// World size 1.
std::unique_ptr<Communicator> make_local_communicator();

}  // namespace kiln
