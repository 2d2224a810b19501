#include "kiln/train/run_shape.h"

namespace kiln {

RunShape run_shape(const Recipe& r, int world_size, int per_node) {
  RunShape s;
  if (world_size == 1) return s;
  s.strategy = r.dist.strategy;
  s.shard_size = s.strategy == ShardStrategy::kHybridShard ? per_node
                 : s.strategy == ShardStrategy::kNoShard   ? 1
                                                           : world_size;
  s.reduce_dtype = r.dist.reduce_dtype;
  return s;
}

}  // namespace kiln
