// The communicator: collectives over a group of workers. Backends: local (world size 1, every
// collective is a copy or nothing), Gloo (CPU, TCP) and, next, NCCL (GPU). The trainer and FSDP
// only ever talk to this interface.
//
// Ordering contract: every rank of a group issues the same collectives in the same order.
// Asynchronous operations run in issue order on the group's communication thread; wait() on
// the returned Work blocks until that one is done and rethrows its error.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor/dtype.h"

namespace kiln {

enum class ReduceOp { kSum, kMean, kMax };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Transport actually in use, recorded in run metadata ("local", "gloo-tcp eth0 10.0.0.2", ...).
  virtual std::string transport() const = 0;

  // data (n) reduced in place over the group.
  virtual std::unique_ptr<Work> all_reduce_async(void* data, size_t n, DType t, ReduceOp op) = 0;
  // out (world * n) = concat over ranks of in (n). `in` may alias out + rank * n.
  virtual std::unique_ptr<Work> all_gather_async(void* out, const void* in, size_t n, DType t) = 0;
  // out (n) = reduce over ranks of in[rank * n, (rank + 1) * n); in: (world * n).
  virtual std::unique_ptr<Work> reduce_scatter_async(void* out, const void* in, size_t n, DType t,
                                                     ReduceOp op) = 0;
  virtual std::unique_ptr<Work> broadcast_async(void* data, size_t n, DType t, int root) = 0;
  virtual void barrier() = 0;
  // Double-precision all-reduce of a few scalars (loss sums, norms, counts).
  virtual void all_reduce(double* data, size_t n, ReduceOp op) = 0;

  // A sub-group of this group's `ranks` (ascending, containing rank()). Every rank of this
  // group calls split() the same number of times in the same order, each with the group it
  // belongs to; `name` distinguishes the groups of one call ("intra", "inter").
  virtual std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                              const std::string& name) = 0;

  // Synchronous forms.
  void all_reduce(float* data, size_t n, ReduceOp op) {
    all_reduce_async(data, n, DType::F32, op)->wait();
  }
  void all_gather(float* out, const float* in, size_t n) {
    all_gather_async(out, in, n, DType::F32)->wait();
  }
  void reduce_scatter(float* out, const float* in, size_t n, ReduceOp op) {
    reduce_scatter_async(out, in, n, DType::F32, op)->wait();
  }
  void broadcast(float* data, size_t n, int root) {
    broadcast_async(data, n, DType::F32, root)->wait();
  }
};

// World size 1.
std::unique_ptr<Communicator> make_local_communicator();

}  // namespace kiln
