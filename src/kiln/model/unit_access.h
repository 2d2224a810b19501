// How the model reaches its parameters and gradients, one flat unit at a time. The model calls,
// per micro-batch: acquire/release around each use of a unit's parameters (forward, then again
// in backward), adds into grad(unit), and calls grad_done(unit) once that unit's gradient for the
// micro-batch is complete. A single process simply hands out its buffers (ParamStore); FSDP
// gathers shards in acquire, frees them in release and reduce-scatters in grad_done.
#pragma once

#include <vector>

#include "kiln/model/layout.h"
#include "kiln/tensor/buffer.h"

namespace kiln {

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  virtual const float* acquire(int unit) = 0;  // the whole unit's parameters
  virtual void release(int unit) = 0;
  virtual float* grad(int unit) = 0;  // the whole unit's gradient, accumulated with +=
  virtual void grad_done(int unit) = 0;
};

// Every unit's parameters and gradients held whole in this process (world size 1).
class ParamStore final : public UnitAccess {
 public:
  explicit ParamStore(const ParamLayout& layout, bool with_grads = true);

  const float* acquire(int unit) override { return params_[unit].data(); }
  void release(int) override {}
  float* grad(int unit) override { return grads_[unit].data(); }
  void grad_done(int) override {}

  int num_units() const { return static_cast<int>(params_.size()); }
  Buffer<float>& params(int unit) { return params_[unit]; }
  const Buffer<float>& params(int unit) const { return params_[unit]; }
  Buffer<float>& grads(int unit) { return grads_[unit]; }
  void zero_grads();
  // Pointer to a named tensor's parameters.
  float* tensor(const std::string& hf_name);

 private:
  const ParamLayout& layout_;
  std::vector<Buffer<float>> params_;
  std::vector<Buffer<float>> grads_;
};

}  // namespace kiln
