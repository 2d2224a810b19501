// Fsdp::acquire_head and release_head: the LM head's table as the model's loss reads it
// (model/vocab_parallel_loss.h). Split along the vocabulary, this rank's shard is its part: the
// table is sharded by whole rows (shard_geometry.h), rank r holds rows [a, b) and no row is cut
// across ranks; the loss's working buffers come from the pool, as communication buffers.
#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/fsdp/fsdp.h"

namespace kiln {

bool splits_vocabulary(ShardStrategy strategy, size_t group, size_t table_numel, size_t tokens,
                       size_t C) {
  if (group == 1) return false;
  if (strategy != ShardStrategy::kFullShard && strategy != ShardStrategy::kShardGradOp) {
    return false;  // no_shard holds the table; hybrid_shard would miss the other nodes' rows
  }
  return group * tokens < table_numel / C;
}

bool Fsdp::vocab_path(const Unit& x, int N, int C) const {
  return splits_vocabulary(strategy_, static_cast<size_t>(shard_.world_size()), x.numel,
                           static_cast<size_t>(N), static_cast<size_t>(C));
}

HeadTable Fsdp::acquire_head(int unit, int N) {
  Unit& x = trainable_unit(unit, "acquire_head");
  const size_t C = layout_.units()[unit].row_width;
  KILN_CHECK(C > 0 && head_.unit < 0, "acquire_head: unit {} is not a table, or a head is in use",
             unit);
  const int V = static_cast<int>(x.numel / C);
  head_.unit = unit;
  head_.split = vocab_path(x, N, static_cast<int>(C));
  if (!head_.split) {
    const ConstDevPtr rows = acquire(unit);  // before grad(unit), which may take a pool buffer
    return whole_head_table(rows, grad(unit), V);
  }
  const size_t per = x.shard_size / C;
  HeadTable t;
  const size_t a = std::min(static_cast<size_t>(V), static_cast<size_t>(shard_.rank()) * per);
  t.a = static_cast<int>(a);
  t.b = static_cast<int>(std::min(static_cast<size_t>(V), a + per));
  t.span = static_cast<int>(per);
  t.rows = ConstDevPtr(x.shard.data());
  if (gather_dtype_ == DType::BF16) {  // the rows in the products' dtype
    head_.rows16 = take(storage_floats(x.shard_size, gather_dtype_));
    be_.cast_to_bf16(head_.rows16.data(), x.shard.data(), x.shard_size);
    t.rows = ConstDevPtr(head_.rows16.data(), gather_dtype_);
  }
  t.grad = x.shard_grad.data();
  t.group = &shard_;
  t.scratch = &head_scratch_;
  return t;
}

void Fsdp::release_head(int unit) {
  KILN_CHECK(head_.unit == unit, "release_head: unit {} is not the head in use", unit);
  head_.unit = -1;
  if (!head_.split) {
    release(unit);
    grad_done(unit);
    return;
  }
  // The gradient went straight into the shard: nothing to reduce.
  if (head_.rows16.size() > 0) give(std::move(head_.rows16));
}

}  // namespace kiln
