// How the model reaches its parameters and gradients, one flat unit at a time. The model calls,
// per micro-batch: acquire/release around each use of a unit's parameters (forward, then again
// in backward), adds into grad(unit), and calls grad_done(unit) once that unit's gradient for the
// micro-batch is complete. A (V, C) table is lent instead, for each of its uses in training, by
// acquire_table/release_table (sharded_table.h: the whole table, or this rank's rows of a split
// one). A single process simply hands out its buffers (ParamStore); FSDP gathers shards in
// acquire, frees them in release, reduce-scatters in grad_done and lends its shards of a table it
// splits. A frozen unit (not ParamUnit::trainable: a LoRA run's base) is only acquired and
// released, or lent for the lookup: the model never asks for its gradient, calls grad_done on
// it, or lends it for a use with a gradient (it computes the head's dx with
// Backend::cross_entropy and no dw).
#pragma once

#include <vector>

#include "kiln/kernels/device/device_buffer.h"
#include "kiln/model/layout.h"
#include "kiln/model/sharded_table.h"

namespace kiln {

// Pointers are device memory of the model's backend, valid in stream order until release.
class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // The whole unit's parameters, in the backend's activation_dtype() (bf16 for bf16 products).
  virtual ConstDevPtr acquire(int unit) = 0;
  virtual void release(int unit) = 0;
  virtual float* grad(int unit) = 0;  // the whole unit's gradient, accumulated with +=
  virtual void grad_done(int unit) = 0;
  // `unit`, a (V, C) table, lent for `use` by a training micro-batch of N tokens on this rank
  // (sharded_table.h): the whole table (rows with the values acquire() gives, gradient rows
  // accumulated with +=), or, with sharded parameters, this rank's rows and the group. A frozen
  // unit only for kLookup. release_table ends the use: for kLookup and kHead it stands for
  // release(unit), for kLookupBackward and kHead for grad_done(unit) (the table's gradient for
  // the micro-batch is complete; a unit another op also reads, a tied LM head, has had its head
  // use first). With sharded parameters both, and the uses between them, are collective: every
  // rank of the group calls them with the same N.
  virtual ShardedTable acquire_table(int unit, int N, TableUse use) = 0;
  virtual void release_table(int unit, TableUse use) = 0;
};

// Every unit's parameters and gradients held whole in this process (world size 1), in device
// memory of `backend`; a frozen unit has no gradient buffer (grads(u) is empty). Each unit is
// stored in stored_dtype() (param_unit.h): a trainable unit in fp32 (when the backend's
// activation_dtype() is BF16, acquire() hands out a bf16 copy made then, as FSDP gathers in bf16,
// freed by the last release); a frozen unit in the activation dtype, handed out as it is (no copy
// and half the memory under bf16). load_unit and read_unit speak fp32 whatever the storage.
class ParamStore final : public UnitAccess {
 public:
  ParamStore(const ParamLayout& layout, const Backend& backend, bool with_grads = true);

  ConstDevPtr acquire(int unit) override;
  void release(int unit) override;
  float* grad(int unit) override { return grads_[unit].data(); }
  void grad_done(int) override {}
  ShardedTable acquire_table(int unit, int N, TableUse use) override;
  void release_table(int unit, TableUse use) override;

  int num_units() const { return static_cast<int>(params_.size()); }
  // The dtype unit `unit` is stored in (stored_dtype of the layout's unit).
  DType stored(int unit) const { return stored_[unit]; }
  // Device buffers of a unit stored in fp32 (a KILN_CHECK refuses one stored in bf16: its
  // values go through load_unit / read_unit). On the CPU backend they are host memory, which
  // tests read and write directly; everything else goes through load_unit / read_unit.
  DeviceBuffer<float>& params(int unit);
  const DeviceBuffer<float>& params(int unit) const;
  DeviceBuffer<float>& grads(int unit) { return grads_[unit]; }
  void zero_grads();
  // Pointer to a named tensor's parameters (device memory) in a unit stored in fp32.
  float* tensor(const std::string& hf_name);
  // Copies a whole unit from host memory (numel floats; rounded to bf16 for a unit stored so);
  // returns once `host` may be reused.
  void load_unit(int unit, const float* host);
  // Copies a whole unit's parameters to host memory (numel floats), waiting for the device.
  void read_unit(int unit, float* host) const;
  // Bytes of device memory the parameters (each unit in its stored dtype) and the gradients hold.
  size_t param_bytes() const;
  size_t grad_bytes() const;

 private:
  // A unit's bf16 copy while it is acquired.
  struct Bf16Copy {
    DeviceBuffer<float> data;  // numel bf16 values in (numel + 1) / 2 floats' storage
    int in_use = 0;
  };
  // Whether acquire() hands out a copy of the unit (stored in fp32, read in bf16).
  bool copies(int unit) const { return stored_[unit] != dtype_; }

  const ParamLayout& layout_;
  const Backend& be_;
  DType dtype_;  // of what acquire() hands out
  DevicePool pool_;
  std::vector<DType> stored_;
  // numel values of stored_[u] in storage_floats(numel, stored_[u]) floats
  std::vector<DeviceBuffer<float>> params_;
  std::vector<DeviceBuffer<float>> grads_;
  std::vector<Bf16Copy> copies_;
};

}  // namespace kiln
