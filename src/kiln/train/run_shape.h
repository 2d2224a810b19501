// How a run of a recipe shards and reduces over its ranks, worked out in one place: the trainer
// builds FSDP from it and the memory plan (memory_settings) plans the same shape.
#pragma once

#include "kiln/fsdp/shard_strategy.h"
#include "kiln/tensor/dtype.h"
#include "kiln/train/recipe.h"

namespace kiln {

struct RunShape {
  // dist.strategy; no_shard for one process (there is nothing to shard over).
  ShardStrategy strategy = ShardStrategy::kNoShard;
  // Ranks each unit is sharded over: the world (full_shard, shard_grad_op), the node
  // (hybrid_shard), 1 under no_shard.
  int shard_size = 1;
  // dist.reduce_dtype; fp32 for one process (nothing is reduced, so nothing is rounded).
  DType reduce_dtype = DType::F32;
};

// The shape of a run of `r` over `world_size` ranks, `per_node` of them on each node.
RunShape run_shape(const Recipe& r, int world_size, int per_node);

}  // namespace kiln
