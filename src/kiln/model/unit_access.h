// How the model reaches its parameters and gradients, one flat unit at a time. The model calls,
// per micro-batch: acquire/release around each use of a unit's parameters (forward, then again
// in backward), adds into grad(unit), and calls grad_done(unit) once that unit's gradient for the
// micro-batch is complete. A single process simply hands out its buffers (ParamStore); FSDP
// gathers shards in acquire, frees them in release and reduce-scatters in grad_done. A frozen
// unit (not ParamUnit::trainable: a LoRA run's base) is only acquired and released: the model
// never asks for its gradient, calls grad_done on it, or calls embed_rows_backward or
// acquire_head (it computes the head's dx with Backend::cross_entropy and no dw).
#pragma once

#include <vector>

#include "kiln/kernels/device/device_buffer.h"
#include "kiln/model/layout.h"

namespace kiln {

class Communicator;

// Device buffers lent for the length of one call (from FSDP's pool, where the memory plan counts
// them as communication buffers); every take is given back before the call returns.
class ScratchLender {
 public:
  virtual ~ScratchLender() = default;
  virtual DeviceBuffer<float> take(size_t n) = 0;  // n floats
  virtual void give(DeviceBuffer<float> b) = 0;
};

// A trainable (V, C) table unit read as the LM head (acquire_head), for the loss
// (model/vocab_parallel_loss.h). With no group, the whole table: rows [0, V) and their
// gradient. With a group, this rank's whole rows [a, b) of a table split along the vocabulary
// over the group's ranks (every rank's part holds `span` rows or fewer, the last ranks' fewer
// or none), and `scratch` lends the loss's working buffers.
struct HeadTable {
  ConstDevPtr rows{static_cast<const float*>(nullptr)};  // (b - a, C), activation_dtype()
  float* grad = nullptr;                                 // (b - a, C) fp32, accumulated with +=
  int a = 0, b = 0;                                      // this rank's rows of the table
  int span = 0;                      // rows of the largest rank's part (b - a with no group)
  Communicator* group = nullptr;     // the ranks holding the other rows; nullptr: whole table
  ScratchLender* scratch = nullptr;  // set with a group
};

// The whole table of V rows, `rows` and its gradient `grad`, with no group: what a ParamStore,
// or an Fsdp that does not split the vocabulary, hands out.
inline HeadTable whole_head_table(ConstDevPtr rows, float* grad, int V) {
  HeadTable t;
  t.rows = rows;
  t.grad = grad;
  t.b = t.span = V;
  return t;
}

// Pointers are device memory of the model's backend, valid in stream order until release.
class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // The whole unit's parameters, in the backend's activation_dtype() (bf16 for bf16 products).
  virtual ConstDevPtr acquire(int unit) = 0;
  virtual void release(int unit) = 0;
  virtual float* grad(int unit) = 0;  // the whole unit's gradient, accumulated with +=
  virtual void grad_done(int unit) = 0;
  // out (N, C) = rows ids (N, device memory) of `unit`'s (V, C) table, with the values acquire()
  // would give (bf16-rounded under bf16), without handing out the table. With sharded
  // parameters this is a collective: every rank of the group calls it with the same N.
  virtual void embed_rows(int unit, const int32_t* ids, int N, int C, float* out) = 0;
  // The lookup's backward: `unit`'s gradient += dout (N, C) rows at ids, and the unit's
  // gradient for the micro-batch is complete: it stands for embedding_backward into grad(unit)
  // and grad_done(unit). A unit whose table another op also reads (a tied LM head) has had
  // grad_done for that part already. With sharded parameters a collective, as embed_rows.
  virtual void embed_rows_backward(int unit, const int32_t* ids, const float* dout, int N,
                                   int C) = 0;
  // `unit`, a trainable (V, C) table (a tied head's embedding), as the LM head of a training
  // micro-batch of N tokens on this rank: the whole table, or (FSDP, when it splits the
  // vocabulary) this rank's rows and the group. release_head stands for release and
  // grad_done(unit): the head's gradient is complete. With sharded parameters both are
  // collective (every rank of the group calls them with the same N), as is the split loss.
  virtual HeadTable acquire_head(int unit, int N) = 0;
  virtual void release_head(int unit) = 0;
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
  void embed_rows(int unit, const int32_t* ids, int N, int C, float* out) override;
  void embed_rows_backward(int unit, const int32_t* ids, const float* dout, int N, int C) override {
    be_.embedding_backward(grads_[unit].data(), dout, ids, N, C);
  }
  HeadTable acquire_head(int unit, int N) override;
  void release_head(int unit) override { release(unit); }

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
