// The communicator seam: collectives over the worker group. Backends: a local one (world size 1,
// every collective is the identity) now; Gloo for CPU and NCCL for GPU implement the same
// interface. The trainer and FSDP only ever talk to this interface.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace kiln {

enum class ReduceOp { kSum, kMean, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Transport actually in use, recorded in run metadata ("local", "gloo-tcp eth0 10.0.0.2", ...).
  virtual std::string transport() const = 0;

  virtual void all_reduce(float* data, size_t n, ReduceOp op) = 0;
  virtual void all_reduce(double* data, size_t n, ReduceOp op) = 0;
  // out (world * n) = concat over ranks of in (n)
  virtual void all_gather(float* out, const float* in, size_t n) = 0;
  // out (n) = reduce over ranks of in[rank * n .. (rank + 1) * n)
  virtual void reduce_scatter(float* out, const float* in, size_t n, ReduceOp op) = 0;
  virtual void broadcast(float* data, size_t n, int root) = 0;
  virtual void barrier() = 0;
};

// World size 1.
std::unique_ptr<Communicator> make_local_communicator();

}  // namespace kiln
