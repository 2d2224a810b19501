// How FSDP shards a model's units (dist.strategy), and the dtype gradients are reduced in
// (dist.reduce_dtype): each enum with its names, listed once (base/named_values.h). The recipe
// holds these values; its parser, its YAML and every log line read the tables.
#pragma once

#include <array>

#include "kiln/base/named_values.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// full_shard: parameters, gradients and optimizer state sharded over the group, units gathered
// for forward and again for backward; shard_grad_op: gathered units kept from forward to
// backward; no_shard: every rank holds everything (gradients all-reduced); hybrid_shard:
// full_shard within a node, replicated across nodes (src/kiln/fsdp/fsdp.h).
enum class ShardStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };
inline constexpr std::array<Named<ShardStrategy>, 4> kShardStrategyNames = {{
    {ShardStrategy::kFullShard, "full_shard"},
    {ShardStrategy::kShardGradOp, "shard_grad_op"},
    {ShardStrategy::kNoShard, "no_shard"},
    {ShardStrategy::kHybridShard, "hybrid_shard"},
}};

// dist.reduce_dtype: the dtype gradients are reduce-scattered (all-reduced) in.
inline constexpr std::array<Named<DType>, 2> kReduceDTypeNames = {{
    {DType::F32, "fp32"},
    {DType::BF16, "bf16"},
}};

}  // namespace kiln
