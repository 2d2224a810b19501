// FSDP over flat parameter units: each rank keeps a 1/S shard of every unit's parameters,
// gradients and (through the Optimizer's ShardRange) optimizer state, gathers a whole unit only
// while the model uses it, and reduce-scatters the unit's gradient as soon as backward is done
// with it. Strategies, as PyTorch FSDP's ShardingStrategy:
//   full_shard     all-gather before forward, free after; all-gather again in backward;
//                  reduce-scatter gradients
//   shard_grad_op  as full_shard, but parameters gathered in forward stay until backward ends
//   no_shard       every rank holds everything; gradients all-reduced (DDP)
//   hybrid_shard   full_shard inside a node (shard group), gradients then all-reduced across
//                  nodes (replica group)
//
// Geometry (shard_geometry.h, the one place that decides it): a unit of n floats is padded to
// S shards of shard_size and rank r of the shard group owns [r * shard_size, (r + 1) *
// shard_size) of the padded unit (the optimizer and checkpoints see the part below n). A (V, C)
// table (the embedding, an untied head: ParamUnit::row_width) is cut between rows, shard_size =
// ceil(V / S) * C, so every rank holds whole rows; any other unit has shard_size = ceil(n / S).
//
// Overlap: acquire(u) orders the compute stream after u's all-gather and immediately issues the
// next unit's (the order is learnt from the first micro-batch, so every rank prefetches
// identically); grad_done(u) issues u's reduce-scatter, ordered after the backward ops that
// wrote the gradient, without waiting. At most the units in use plus one prefetched unit are
// gathered at any time (plus, for shard_grad_op, those kept for backward).
//
// Frozen units (not ParamUnit::trainable: a LoRA run's base) have no gradient: their shards are
// stored in the gather dtype (bf16 under bf16 mixed precision, half the bytes), gathered as they
// are and never reduced; grad(), grad_done() and acquire_table for a use with a gradient
// refuse them, and the gradient norm, clipping and the optimizer see only the trainable units.
//
// Dtype: shards, gradients and optimizer state are fp32. Units are gathered in the backend's
// activation_dtype(): bf16 under bf16 mixed precision (each rank rounds its shard into its slot
// of the gathered buffer, then the all-gather moves half the bytes), so the model reads bf16
// weights, as PyTorch FSDP's MixedPrecision(param_dtype=bf16) does; no_shard then keeps a bf16
// copy while the unit is in use. Gradients are reduced in fp32, or in bf16 when asked
// (dist.reduce_dtype: each whole-unit gradient is rounded to bf16 before its reduce-scatter, and
// the reduced shard widened back and added into the fp32 gradient shard).
//
// Memory and order: shards, gradients and gathered units are device memory of the backend
// (gathered units and gradient buffers from a DevicePool); every collective is ordered after
// the compute stream's producer through the communicator's `after` stream, and the compute
// stream waits for it (Work::wait) before it reads the result. The host never blocks on
// communication except where a pooled buffer is handed back and in finish_backward().
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/fsdp/pool_books.h"
#include "kiln/fsdp/shard_strategy.h"
#include "kiln/kernels/device/cast_copy.h"
#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/ops.h"
#include "kiln/model/unit_access.h"

namespace kiln {

// Whether Fsdp lends a (rows, C) table split along its rows (sharded_table.h) to a use by
// `tokens` per rank on each of `group` ranks of the shard communicator, rather than gathering it:
// the one place that decides it. Split when the group's tokens are fewer than the table's rows
// (then moving the tokens costs less than gathering the table), the strategy shards the table
// (not no_shard), the shard is stored in fp32 (`fp32_shard`: the split uses read fp32 rows; a
// frozen table stored in bf16 is gathered), and, for a use with a gradient (the lookup's
// backward, the LM head's loss), the shard group alone completes the gradient (not
// hybrid_shard: the other nodes' rows would be missing).
bool splits_table(ShardStrategy strategy, size_t group, size_t rows, size_t tokens, bool with_grad,
                  bool fp32_shard);

class Fsdp final : public UnitAccess {
 public:
  // shard: the group parameters are sharded over (the world, or the node for hybrid);
  // replica: the group shards are replicated over (nullptr unless hybrid_shard).
  Fsdp(const ParamLayout& layout, const Backend& backend, ShardStrategy strategy,
       Communicator& shard, Communicator* replica, bool prefetch = true,
       DType reduce_dtype = DType::F32);
  ~Fsdp() override;

  // UnitAccess
  ConstDevPtr acquire(int unit) override;
  void release(int unit) override;
  float* grad(int unit) override;
  void grad_done(int unit) override;
  // A (V, C) table (ParamUnit::row_width) lent for one use (UnitAccess::acquire_table). When
  // splits_table says so, this rank's shard, whole rows (shard_geometry.h), its gradient shard as
  // the gradient rows, the shard communicator as the group and the pool lending the use's buffers
  // (counted as communication buffers): the table is never gathered nor its whole gradient held,
  // and release_table has nothing to reduce. Otherwise the table as acquire() gives it and its
  // whole-unit gradient, released and reduced by release_table as usual; except for the
  // lookup's backward under no_shard once the table's gradient was all-reduced in this
  // micro-step (a tied head's part): then the whole table's gradient, after that reduction, with
  // the shard communicator, so that every rank's rows are added (sharded_table.h).
  ShardedTable acquire_table(int unit, int N, TableUse use) override;
  void release_table(int unit, TableUse use) override;

  // Gradient accumulation: with sync off (micro-steps before the last), strategies that can
  // keep whole-unit gradients (no_shard, shard_grad_op) skip communication and accumulate
  // locally; the others reduce-scatter every micro-step.
  void set_sync_grads(bool sync) { sync_ = sync; }
  // Call after each forward + backward pass: finishes outstanding communication so that
  // shard_grads() hold the step's summed gradients (in stream order) once the last micro-step's
  // is done; then (with sync on) drops parameters kept for backward. The next pass prefetches
  // from its first unit again.
  void finish_backward();
  // Call after a forward-only pass (evaluation): drops the units it gathered (shard_grad_op's
  // kept for a backward that will not come, a prefetched one) and the next pass prefetches from
  // its first unit again. It has no gradients to finish, and it teaches no prefetch order (a
  // training pass's order includes its backward).
  void finish_forward();

  ShardStrategy strategy() const { return strategy_; }
  const Backend& backend() const { return be_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  // This rank's part of each unit, for the optimizer (empty range if it owns only padding).
  std::vector<ShardRange> shard_ranges() const;
  // This rank's shard of a trainable unit's parameters and gradients: device memory, (shard
  // size) fp32.
  float* shard_params(int unit);
  float* shard_grads(int unit);
  bool trainable(int unit) const { return !units_[unit].frozen; }
  void zero_grads();
  // *sq_norm (one device double) = sum of squares of the whole model's gradient, the same on
  // every rank once the compute stream reaches it; the host does not wait.
  void grad_sq_norm(double* sq_norm);
  // Clips every gradient shard to max_norm given the device norm from grad_sq_norm().
  void clip_grads(const double* sq_norm, double max_norm);

  // Sets elements [offset, offset + n) of this rank's shard of `unit` (offsets within the shard,
  // i.e. from shard_ranges()[unit].begin) from host memory (fp32; a frozen unit's shard keeps
  // them rounded to its dtype, on the device through one staging buffer of at most 16 MiB that
  // every call reuses and the first acquire() frees); returns once `src` may be reused.
  // Loading a unit is one zero_shard() then its parts: no rank ever holds more than its own.
  void load_shard(int unit, size_t offset, const float* src, size_t n);
  void zero_shard(int unit) { units_[unit].shard.zero(); }
  // Bytes of a unit as gathered (padded, in the gather dtype).
  // (A frozen unit's shard is stored in that dtype too.)
  size_t gathered_bytes(int unit) const {
    return storage_floats(units_[unit].padded, gather_dtype_) * sizeof(float);
  }
  // Bytes held in this rank's parameter shards (frozen ones in their dtype) and gradient shards,
  // and the peak of gathered whole-unit buffers.
  size_t param_shard_bytes() const;
  size_t grad_shard_bytes() const;
  size_t peak_gathered_bytes() const { return peak_gathered_; }
  // Bytes the pool of gathered units and gradient buffers holds (it keeps what it made), and
  // by use.
  size_t pool_bytes() const { return books_.bytes(); }
  PoolParts pool_parts() const { return books_.parts(); }
  // Hands the pool's buffers back (after the last step, before the final save): the next
  // acquire or grad starts a fresh pool. Waits for outstanding work first.
  void release_buffers();

 private:
  struct Unit {
    size_t numel = 0, padded = 0, shard_size = 0;
    bool frozen = false;
    DType store = DType::F32;               // of `shard`: the gather dtype when frozen
    DeviceBuffer<float> shard, shard_grad;  // (shard_size) in `store`; fp32, none when frozen
    DeviceBuffer<float> full;         // gathered parameters (gather_dtype_ storage), empty when not
    std::unique_ptr<Work> gathering;  // in-flight all-gather into `full`
    int in_use = 0;
    bool keep = false;              // shard_grad_op: keep until finish_backward()
    DeviceBuffer<float> full_grad;  // whole-unit gradient during backward (and across micro-steps)
    bool reduced = false;           // grad_done issued its reduction in this micro-step
  };
  // A unit's gradient on its way from the whole-unit buffer into the shard: the reduce-scatter
  // (and, for hybrid_shard, the all-reduce across replicas) in flight.
  struct Pending {
    int unit;
    std::unique_ptr<Work> work;
    DeviceBuffer<float> full_grad;  // owned until the reduce-scatter is done (reduce_dtype_)
    DeviceBuffer<float> out;        // the reduce-scattered shard (reduce_dtype_), added into
                                    // shard_grad when done; no_shard in bf16: the bf16 copy
  };

  // Whether acquire() hands out a gathered buffer (else the shard itself: no_shard when the
  // shard is stored in the gather dtype).
  bool gathers(const Unit& x) const {
    return strategy_ != ShardStrategy::kNoShard || gather_dtype_ != x.store;
  }
  Unit& trainable_unit(int unit, const char* what);
  // Unit x (unit) as lent by rows to a use: this rank's rows of it and the shard communicator;
  // with_grad: its gradient shard as the gradient rows.
  ShardedTable lent_rows(Unit& x, int unit, bool with_grad);
  void start_gather(int unit);
  void free_full(int unit);
  void complete(Pending& p);
  // The whole-unit gradient in reduce_dtype_: `g` itself in fp32, else a bf16 copy (and `g`
  // goes back to the pool).
  DeviceBuffer<float> to_reduce_dtype(DeviceBuffer<float> g, size_t n);
  // shard_grad (n) += widen(src) where src is a reduced buffer in reduce_dtype_.
  void add_reduced(float* shard_grad, DeviceBuffer<float>& src, size_t n);
  void drain(size_t keep_at_most);
  // Gives back every gathered unit not in use, those kept for backward included.
  void free_unused_gathered();
  void track_gathered(long delta);

  const ParamLayout& layout_;
  // Every pooled buffer goes through take/give, so the pool's footprint is known, by use.
  DeviceBuffer<float> take(size_t n, PoolUse use = PoolUse::kComm);
  void give(DeviceBuffer<float> b, PoolUse use = PoolUse::kComm);

  const Backend& be_;
  std::unique_ptr<DevicePool> pool_;
  PoolBooks books_;
  ShardStrategy strategy_;
  DType gather_dtype_;
  DType reduce_dtype_;
  Communicator& shard_;
  Communicator* replica_;
  bool prefetch_;
  bool sync_ = true;
  std::vector<Unit> units_;
  std::vector<int> order_;  // acquire order learnt from the first micro-batch
  bool order_known_ = false;
  size_t order_pos_ = 0;
  std::deque<Pending> pending_;
  size_t gathered_ = 0, peak_gathered_ = 0;
  CastCopy load_copy_{be_};  // load_shard's staging (bf16 frozen shards), until the first acquire
  // The table lent (acquire_table to release_table).
  struct Lent {
    int unit = -1;
    TableUse use = TableUse::kLookup;
    bool by_rows = false;  // this rank's rows and the group, rather than the table acquired
  };
  Lent lent_;
  // Lends a table's uses the pool's buffers, as communication buffers.
  class TableScratch final : public ScratchLender {
   public:
    explicit TableScratch(Fsdp& f) : f_(f) {}
    DeviceBuffer<float> take(size_t n) override { return f_.take(n); }
    void give(DeviceBuffer<float> b) override { f_.give(std::move(b)); }

   private:
    Fsdp& f_;
  };
  TableScratch table_scratch_{*this};
};

}  // namespace kiln
