// How a flat unit is cut into the shards of S ranks: the one place that decides it (Fsdp, and
// through it the optimizer's ShardRange, checkpoint_ranges and the memory plan, read it).
//
// A unit of n floats is padded to S shards of shard_size: rank r owns [r * shard_size,
// (r + 1) * shard_size) of the padded unit, the part below n being real elements.
//   - A (V, C) table (ParamUnit::row_width = C: the embedding, an untied LM head) is cut between
//     rows: shard_size = ceil(V / S) * C, so rank r holds the whole rows
//     [r * ceil(V / S), (r + 1) * ceil(V / S)) ∩ [0, V) and no row is split across ranks (the
//     vocabulary-parallel head and the lookup by rows read whole rows). A rank past the last
//     row holds only padding.
//   - Any other unit: shard_size = ceil(n / S).
#pragma once

#include <cstddef>

#include "kiln/model/param_unit.h"

namespace kiln {

struct ShardGeometry {
  size_t shard_size = 0;  // floats per rank
  size_t padded = 0;      // S * shard_size >= numel
};

inline ShardGeometry shard_geometry(const ParamUnit& u, size_t S) {
  const size_t step = u.row_width > 0 ? u.row_width : 1;  // the unit is cut at multiples of it
  const size_t steps = (u.numel + step - 1) / step;
  const size_t shard_size = (steps + S - 1) / S * step;
  return {shard_size, shard_size * S};
}

}  // namespace kiln
