// Fsdp::acquire_table and release_table: a (V, C) table lent to the model's uses of it
// (model/sharded_table.h computes them: the lookup, its backward, the LM head's loss). Split, the
// table is sharded by whole rows (shard_geometry.h): rank r holds rows [a, b) and no row is cut
// across ranks; the uses' working buffers come from the pool, as communication buffers. FSDP
// computes nothing here: it decides (splits_table), lends, and reduces what it did not lend.
#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/fsdp/fsdp.h"

namespace kiln {

bool splits_table(ShardStrategy strategy, size_t group, size_t rows, size_t tokens, bool with_grad,
                  bool fp32_shard) {
  if (group == 1 || strategy == ShardStrategy::kNoShard || !fp32_shard) return false;
  if (with_grad && strategy == ShardStrategy::kHybridShard) return false;
  return group * tokens < rows;
}

ShardedTable Fsdp::lent_rows(Unit& x, int unit, bool with_grad) {
  const size_t C = layout_.units()[unit].row_width;
  const size_t V = x.numel / C, per = x.shard_size / C;
  const size_t a = std::min(V, static_cast<size_t>(shard_.rank()) * per);
  ShardedTable t;
  t.rows = ConstDevPtr(x.shard.data());
  t.grad = with_grad ? x.shard_grad.data() : nullptr;
  t.a = static_cast<int>(a);
  t.b = static_cast<int>(std::min(V, a + per));
  t.span = static_cast<int>(per);
  t.group = &shard_;
  t.scratch = &table_scratch_;
  return t;
}

ShardedTable Fsdp::acquire_table(int unit, int N, TableUse use) {
  const bool with_grad = use != TableUse::kLookup;
  Unit& x = with_grad ? trainable_unit(unit, "acquire_table") : units_[unit];
  const size_t C = layout_.units()[unit].row_width;
  KILN_CHECK(C > 0 && lent_.unit < 0, "acquire_table: unit {} is not a table, or a table is lent",
             unit);
  const int V = static_cast<int>(x.numel / C);
  const size_t S = static_cast<size_t>(shard_.world_size());
  const bool split = splits_table(strategy_, S, static_cast<size_t>(V), static_cast<size_t>(N),
                                  with_grad, x.store == DType::F32);
  // no_shard's lookup backward after the table's all-reduce (see fsdp.h).
  const bool reduced = use == TableUse::kLookupBackward && strategy_ == ShardStrategy::kNoShard &&
                       S > 1 && x.reduced;
  lent_ = {unit, use, split || reduced};
  if (use == TableUse::kLookup) {
    return split ? lent_rows(x, unit, false) : whole_table(acquire(unit), nullptr, V);
  }
  if (use == TableUse::kLookupBackward) {
    x.reduced = false;
    if (!lent_.by_rows) return whole_table(ConstDevPtr(nullptr, DType::F32), grad(unit), V);
    // What the unit's grad_done reduced lands in its gradient shard first (no_shard in bf16
    // overwrites it), then the rows add on top, in stream order.
    drain(0);
    if (split) return lent_rows(x, unit, true);
    ShardedTable t = whole_table(ConstDevPtr(nullptr, DType::F32), x.shard_grad.data(), V);
    t.group = &shard_;
    t.scratch = &table_scratch_;
    return t;
  }
  if (split) return lent_rows(x, unit, true);
  const ConstDevPtr rows = acquire(unit);  // before grad(unit), which may take a pool buffer
  return whole_table(rows, grad(unit), V);
}

void Fsdp::release_table(int unit, TableUse use) {
  KILN_CHECK(lent_.unit == unit && lent_.use == use,
             "release_table: unit {} is not the table lent for this use", unit);
  lent_.unit = -1;
  if (lent_.by_rows) return;  // the gradient went straight into the shard: nothing to reduce
  if (use != TableUse::kLookupBackward) release(unit);
  if (use != TableUse::kLookup) grad_done(unit);
}

}  // namespace kiln
