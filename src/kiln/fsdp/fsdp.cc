#include "kiln/fsdp/fsdp.h"

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/fsdp/shard_geometry.h"

namespace kiln {

Fsdp::Fsdp(const ParamLayout& layout, const Backend& backend, ShardStrategy strategy,
           Communicator& shard, Communicator* replica, bool prefetch, DType reduce_dtype)
    : layout_(layout),
      be_(backend),
      pool_(std::make_unique<DevicePool>(backend)),
      strategy_(strategy),
      gather_dtype_(backend.activation_dtype()),
      reduce_dtype_(reduce_dtype),
      shard_(shard),
      replica_(replica),
      prefetch_(prefetch) {
  KILN_CHECK((strategy == ShardStrategy::kHybridShard) == (replica != nullptr),
             "a replica group is needed for (and only for) hybrid_shard");
  KILN_CHECK(reduce_dtype == DType::F32 || reduce_dtype == DType::BF16,
             "gradients reduce in F32 or BF16, not {}", dtype_name(reduce_dtype));
  const size_t S =
      strategy == ShardStrategy::kNoShard ? 1 : static_cast<size_t>(shard.world_size());
  units_.resize(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    Unit& x = units_[u];
    x.numel = layout.units()[u].numel;
    const ShardGeometry g = shard_geometry(layout.units()[u], S);
    x.padded = g.padded;
    x.shard_size = g.shard_size;
    x.frozen = !layout.units()[u].trainable;
    x.store = stored_dtype(layout.units()[u], gather_dtype_);
    x.shard = DeviceBuffer<float>(be_, storage_floats(x.shard_size, x.store));
    if (!x.frozen) x.shard_grad = DeviceBuffer<float>(be_, x.shard_size);
  }
}

Fsdp::~Fsdp() {
  // Outstanding work must finish before the buffers it writes go away.
  for (auto& p : pending_) {
    try {
      p.work->wait_host();
    } catch (...) {
    }
  }
  for (auto& x : units_) {
    if (x.gathering) {
      try {
        x.gathering->wait_host();
      } catch (...) {
      }
    }
  }
  try {
    be_.synchronize();
  } catch (...) {
  }
}

std::vector<ShardRange> Fsdp::shard_ranges() const {
  std::vector<ShardRange> out;
  const size_t r = strategy_ == ShardStrategy::kNoShard ? 0 : static_cast<size_t>(shard_.rank());
  for (const auto& x : units_) {
    const size_t b = std::min(x.numel, r * x.shard_size);
    const size_t e = std::min(x.numel, (r + 1) * x.shard_size);
    out.push_back({b, e});
  }
  return out;
}

Fsdp::Unit& Fsdp::trainable_unit(int unit, const char* what) {
  KILN_CHECK(!units_[unit].frozen, "{} of frozen unit {} ({})", what, unit,
             layout_.units()[unit].name);
  return units_[unit];
}

float* Fsdp::shard_params(int unit) { return trainable_unit(unit, "shard_params").shard.data(); }
float* Fsdp::shard_grads(int unit) { return trainable_unit(unit, "shard_grads").shard_grad.data(); }

DeviceBuffer<float> Fsdp::take(size_t n, PoolUse use) {
  books_.take(n, use);
  return pool_->take(n);
}

void Fsdp::give(DeviceBuffer<float> b, PoolUse use) {
  books_.give(b.size(), use);
  pool_->give(std::move(b));
}

void Fsdp::release_buffers() {
  drain(0);
  free_unused_gathered();
  for (int u = 0; u < num_units(); ++u) {
    if (units_[u].full_grad.size() > 0) give(std::move(units_[u].full_grad), PoolUse::kGrads);
    units_[u].full_grad = DeviceBuffer<float>();
  }
  be_.synchronize();  // nothing in flight uses a pooled buffer now
  pool_ = std::make_unique<DevicePool>(be_);
  books_.renew();
}

void Fsdp::track_gathered(long delta) {
  gathered_ = static_cast<size_t>(static_cast<long>(gathered_) + delta);
  peak_gathered_ = std::max(peak_gathered_, gathered_);
}

// A pooled buffer is reused only in stream order: a compute-stream user comes after the waits
// already enqueued there, and a collective starts only after the compute stream's work at its
// issue, so no buffer is written while an earlier reader may still run.
void Fsdp::start_gather(int unit) {
  Unit& x = units_[unit];
  if (x.full.size() > 0 || !gathers(x)) return;
  const DType t = gather_dtype_;
  x.full = take(storage_floats(x.padded, t), PoolUse::kGathered);
  track_gathered(static_cast<long>(x.full.bytes()));
  Stream* after = &be_.compute_stream();
  if (x.store == t) {  // fp32, or a frozen shard kept in the gather dtype
    x.gathering = shard_.all_gather_async(x.full.data(), x.shard.data(), x.shard_size, t, after);
    return;
  }
  // bf16: this rank's shard, rounded, into its slot; the all-gather fills the others in place.
  const bool sharded = strategy_ != ShardStrategy::kNoShard;
  const size_t rank = sharded ? static_cast<size_t>(shard_.rank()) : 0;
  void* mine = reinterpret_cast<char*>(x.full.data()) + rank * x.shard_size * dtype_size(t);
  be_.cast_to_bf16(mine, x.shard.data(), x.shard_size);
  if (sharded) x.gathering = shard_.all_gather_async(x.full.data(), mine, x.shard_size, t, after);
}

void Fsdp::free_full(int unit) {
  Unit& x = units_[unit];
  if (x.full.size() == 0) return;
  if (x.gathering) {
    x.gathering->wait(be_.compute_stream());
    x.gathering.reset();
  }
  track_gathered(-static_cast<long>(x.full.bytes()));
  give(std::move(x.full), PoolUse::kGathered);
  x.full = DeviceBuffer<float>();
}

ConstDevPtr Fsdp::acquire(int unit) {
  Unit& x = units_[unit];
  // Learn the order of the first pass; afterwards follow it to prefetch.
  if (!order_known_) {
    order_.push_back(unit);
  } else if (order_pos_ < order_.size() && order_[order_pos_] != unit) {
    auto it = std::find(order_.begin() + static_cast<long>(order_pos_), order_.end(), unit);
    order_pos_ = it == order_.end() ? order_.size() : static_cast<size_t>(it - order_.begin());
  }
  if (order_known_ && order_pos_ < order_.size()) ++order_pos_;
  if (load_copy_.staging_bytes() > 0) load_copy_.release();  // loading is over
  ++x.in_use;
  if (!gathers(x)) return {x.shard.data(), x.store};
  start_gather(unit);
  if (prefetch_ && order_known_ && order_pos_ < order_.size()) start_gather(order_[order_pos_]);
  if (x.gathering) {
    x.gathering->wait(be_.compute_stream());
    x.gathering.reset();
  }
  if (strategy_ == ShardStrategy::kShardGradOp) x.keep = true;
  return {x.full.data(), gather_dtype_};
}

void Fsdp::release(int unit) {
  Unit& x = units_[unit];
  KILN_CHECK(x.in_use > 0, "release of unit {} that was not acquired", unit);
  --x.in_use;
  if (x.in_use == 0 && !x.keep) free_full(unit);
}

float* Fsdp::grad(int unit) {
  Unit& x = trainable_unit(unit, "grad");
  if (strategy_ == ShardStrategy::kNoShard) return x.shard_grad.data();
  if (x.full_grad.size() == 0) {
    x.full_grad = take(x.padded, PoolUse::kGrads);
    x.full_grad.zero();
  }
  return x.full_grad.data();
}

void Fsdp::grad_done(int unit) {
  Unit& x = trainable_unit(unit, "grad_done");
  const bool can_defer =
      strategy_ == ShardStrategy::kNoShard || strategy_ == ShardStrategy::kShardGradOp;
  if (!sync_ && can_defer) return;  // accumulate locally until the last micro-step
  x.reduced = true;
  Stream* after = &be_.compute_stream();
  const DType t = reduce_dtype_;
  Pending p;
  p.unit = unit;
  if (strategy_ == ShardStrategy::kNoShard && t == DType::F32) {
    p.work = shard_.all_reduce_async(x.shard_grad.data(), x.shard_size, t, ReduceOp::kSum, after);
  } else if (strategy_ == ShardStrategy::kNoShard) {
    // bf16: reduce a rounded copy; complete() writes the sum back over the local gradient.
    p.out = take(storage_floats(x.shard_size, t));
    be_.cast_to_bf16(p.out.data(), x.shard_grad.data(), x.shard_size);
    p.work = shard_.all_reduce_async(p.out.data(), x.shard_size, t, ReduceOp::kSum, after);
  } else {
    KILN_CHECK(x.full_grad.size() > 0, "grad_done of unit {} without a gradient", unit);
    p.full_grad = to_reduce_dtype(std::move(x.full_grad), x.padded);
    x.full_grad = DeviceBuffer<float>();
    p.out = take(storage_floats(x.shard_size, t));
    p.work = shard_.reduce_scatter_async(p.out.data(), p.full_grad.data(), x.shard_size, t,
                                         ReduceOp::kSum, after);
  }
  pending_.push_back(std::move(p));
  drain(2);  // bound the whole-unit gradients in flight
}

DeviceBuffer<float> Fsdp::to_reduce_dtype(DeviceBuffer<float> g, size_t n) {
  if (reduce_dtype_ == DType::F32) return g;
  DeviceBuffer<float> g16 = take(storage_floats(n, DType::BF16), PoolUse::kGrads);
  be_.cast_to_bf16(g16.data(), g.data(), n);
  give(std::move(g), PoolUse::kGrads);  // reused only in stream order, after the cast
  return g16;
}

void Fsdp::add_reduced(float* shard_grad, DeviceBuffer<float>& src, size_t n) {
  if (reduce_dtype_ == DType::F32) {
    be_.add(shard_grad, shard_grad, src.data(), n);
    return;
  }
  DeviceBuffer<float> wide = take(n);
  be_.cast_from_bf16(wide.data(), src.data(), n);
  be_.add(shard_grad, shard_grad, wide.data(), n);
  give(std::move(wide));
}

void Fsdp::complete(Pending& p) {
  Stream& compute = be_.compute_stream();
  p.work->wait(compute);
  if (p.out.size() == 0) return;  // no_shard in fp32: reduced in place
  Unit& x = units_[p.unit];
  if (strategy_ == ShardStrategy::kNoShard) {  // bf16: the sum replaces the local gradient
    be_.cast_from_bf16(x.shard_grad.data(), p.out.data(), x.shard_size);
    give(std::move(p.out));
    return;
  }
  if (replica_ != nullptr) {
    // hybrid_shard: the shard's sum across nodes
    replica_->all_reduce_async(p.out.data(), x.shard_size, reduce_dtype_, ReduceOp::kSum, &compute)
        ->wait(compute);
  }
  add_reduced(x.shard_grad.data(), p.out, x.shard_size);
  give(std::move(p.full_grad), PoolUse::kGrads);
  give(std::move(p.out));
}

void Fsdp::drain(size_t keep_at_most) {
  while (pending_.size() > keep_at_most) {
    complete(pending_.front());
    pending_.pop_front();
  }
}

void Fsdp::free_unused_gathered() {
  for (int u = 0; u < num_units(); ++u) {
    units_[u].keep = false;
    if (units_[u].in_use == 0) free_full(u);
  }
}

void Fsdp::finish_backward() {
  drain(0);
  if (!order_known_ && !order_.empty()) order_known_ = true;
  order_pos_ = 0;
  for (auto& x : units_) x.reduced = false;
  if (sync_) free_unused_gathered();
}

void Fsdp::finish_forward() {
  KILN_CHECK(pending_.empty(), "finish_forward() after a backward (finish_backward() ends it)");
  if (!order_known_) order_.clear();
  order_pos_ = 0;
  free_unused_gathered();
}

void Fsdp::zero_grads() {
  for (auto& x : units_) {
    if (!x.frozen) x.shard_grad.zero();
  }
}

void Fsdp::grad_sq_norm(double* sq_norm) {
  const auto ranges = shard_ranges();
  be_.fill_zero(sq_norm, sizeof(double));
  for (int u = 0; u < num_units(); ++u) {
    if (trainable(u)) be_.sum_squares(sq_norm, units_[u].shard_grad.data(), ranges[u].size());
  }
  if (strategy_ != ShardStrategy::kNoShard) {
    Stream& compute = be_.compute_stream();
    shard_.all_reduce_f64_async(sq_norm, 1, ReduceOp::kSum, &compute)->wait(compute);
  }
}

void Fsdp::clip_grads(const double* sq_norm, double max_norm) {
  for (auto& x : units_) {
    if (!x.frozen) be_.clip_by_norm(x.shard_grad.data(), x.shard_size, sq_norm, max_norm);
  }
}

void Fsdp::load_shard(int unit, size_t offset, const float* src, size_t n) {
  Unit& x = units_[unit];
  KILN_CHECK(offset <= x.shard_size && n <= x.shard_size - offset,
             "unit {}: load of [{}, {}) outside the shard's {}", unit, offset, offset + n,
             x.shard_size);
  // A frozen shard in bf16 is rounded on the device through load_copy_'s one staging buffer,
  // reused by every piece of every unit (dropped by the first acquire).
  load_copy_.to_device(reinterpret_cast<char*>(x.shard.data()) + offset * dtype_size(x.store),
                       x.store, src, n);
  be_.synchronize();  // `src` is the caller's again
}

size_t Fsdp::param_shard_bytes() const {
  size_t n = 0;
  for (const auto& x : units_) n += x.shard.bytes();
  return n;
}

size_t Fsdp::grad_shard_bytes() const {
  size_t n = 0;
  for (const auto& x : units_) n += x.shard_grad.bytes();
  return n;
}

}  // namespace kiln
