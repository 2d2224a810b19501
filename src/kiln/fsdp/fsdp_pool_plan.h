// What Fsdp's pool holds after training steps, worked out without memory: the pool keeps every
// buffer it made and reuses one only of the same size, so what it holds is, for each buffer
// size, the most buffers of that size alive at once. Buffers of different kinds can share a size
// (under bf16 at two ranks a gathered unit is exactly as large as a reduced shard), so the plan
// replays the takes and gives of Fsdp for two steps (the first learns the order, the second
// prefetches) in the order Decoder's forward and backward call acquire, release, grad and
// grad_done. tests/train/memory_plan_test.cc holds it to a real Fsdp's pool_bytes().
#pragma once

#include <cstddef>
#include <vector>

#include "kiln/fsdp/fsdp.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

struct FsdpPoolSettings {
  std::vector<size_t> unit_numel;  // embed, layers.0 ..., head, lm_head if untied (ParamLayout)
  bool tied = true;                // the LM head reads the embed unit
  ShardStrategy strategy = ShardStrategy::kFullShard;
  size_t shard_size = 1;  // ranks a unit is sharded over (1 under no_shard)
  DType gather = DType::F32;
  DType reduce = DType::F32;
  bool prefetch = true;
  // A training micro-batch's tokens per rank and the hidden size, and the ranks of FSDP's shard
  // communicator (the world under no_shard): Fsdp::embed_rows' buffers.
  size_t tokens = 1, hidden = 1, group_size = 1;
};

// Bytes the pool holds, by the kind of buffer that first needed each: gathered units, whole-unit
// gradients (with their reduce-dtype copies), reduced shards (with their widened copies).
struct FsdpPoolPlan {
  size_t gathered = 0, grads = 0, comm = 0;
  size_t total() const { return gathered + grads + comm; }
};

FsdpPoolPlan plan_fsdp_pool(const FsdpPoolSettings& s);

}  // namespace kiln
