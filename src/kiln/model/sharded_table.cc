// table_lookup and table_lookup_backward (sharded_table.h): with a group, every rank's tokens
// meet this rank's rows [a, b), element a * C onwards of the flattened table, through the
// backend's *_part ops (a row outside the part reads as zeros, or its gradient is dropped).
#include "kiln/model/sharded_table.h"

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/comm/communicator.h"

namespace kiln {

DeviceBuffer<float> gather_elements(const Backend& be, Communicator& group, ScratchLender& lend,
                                    const void* mine, size_t n) {
  Stream* after = &be.compute_stream();
  // Any 4-byte elements travel as floats: an all-gather only copies them.
  DeviceBuffer<float> all =
      lend.take(std::max<size_t>(static_cast<size_t>(group.world_size()) * n, 1));
  group.all_gather_async(all.data(), mine, n, DType::F32, after)->wait(*after);
  return all;
}

DeviceBuffer<float> gather_table_ids(const Backend& be, const ShardedTable& t, const int32_t* ids,
                                     int N) {
  return gather_elements(be, *t.group, *t.scratch, ids, static_cast<size_t>(N));
}

size_t product_copy_floats(const Backend& be, const ShardedTable& t, int C) {
  const DType dt = be.activation_dtype();
  if (t.rows.dtype == dt) return 0;
  KILN_CHECK(dt == DType::BF16, "LM head: rows in {} for products in {}", dtype_name(t.rows.dtype),
             dtype_name(dt));
  return std::max<size_t>(storage_floats(static_cast<size_t>(std::max(t.span, 1)) * C, dt), 1);
}

ConstDevPtr product_rows(const Backend& be, const ShardedTable& t, int C, float* copy) {
  if (product_copy_floats(be, t, C) == 0) return t.rows;
  be.cast_to_bf16(copy, t.rows.f32(), static_cast<size_t>(t.b - t.a) * C);
  return ConstDevPtr(copy, DType::BF16);
}

namespace {

const ShardedTable& checked_split(const ShardedTable& t, const char* what) {
  KILN_CHECK(t.scratch != nullptr && 0 <= t.a && t.a <= t.b && t.b - t.a <= t.span,
             "{}: rows [{}, {}) of a table split by {}", what, t.a, t.b, t.span);
  return t;
}

// This rank's part of the flattened table: elements [a * C, b * C).
size_t part_begin(const ShardedTable& t, int C) { return static_cast<size_t>(t.a) * C; }
size_t part_len(const ShardedTable& t, int C) { return static_cast<size_t>(t.b - t.a) * C; }

// A split use's buffers from table.scratch, given back (in stream order) when it ends: every
// rank's ids (S * N, gathered) and room for every rank's rows (S * N, C).
class SplitUse {
 public:
  SplitUse(const Backend& be, const ShardedTable& t, const int32_t* ids, int N, int C,
           const char* what)
      : t_(checked_split(t, what)),
        all_ids_(gather_table_ids(be, t, ids, N)),
        rows_(t.scratch->take(static_cast<size_t>(t.group->world_size()) * N * C)) {}
  ~SplitUse() {
    t_.scratch->give(std::move(all_ids_));
    t_.scratch->give(std::move(rows_));
  }
  SplitUse(const SplitUse&) = delete;
  SplitUse& operator=(const SplitUse&) = delete;

  const int32_t* all_ids() const { return reinterpret_cast<const int32_t*>(all_ids_.data()); }
  float* rows() { return rows_.data(); }

 private:
  const ShardedTable& t_;
  DeviceBuffer<float> all_ids_;
  DeviceBuffer<float> rows_;
};

}  // namespace

void table_lookup(const Backend& be, const ShardedTable& t, const int32_t* ids, int N, int C,
                  float* out) {
  const bool round_bf16 = be.activation_dtype() == DType::BF16;
  if (t.group == nullptr) {
    KILN_CHECK(t.a == 0, "table_lookup: a whole table from row {}", t.a);
    if (t.rows.dtype == be.activation_dtype()) {
      be.embedding_forward(out, ids, t.rows, N, C);
    } else {  // fp32 rows read in bf16
      be.embedding_forward_part(out, ids, t.rows.f32(), 0, part_len(t, C), N, C, round_bf16);
    }
    return;
  }
  const int S = t.group->world_size();
  Stream* after = &be.compute_stream();
  SplitUse use(be, t, ids, N, C, "table_lookup");
  be.embedding_forward_part(use.rows(), use.all_ids(), t.rows.f32(), part_begin(t, C),
                            part_len(t, C), S * N, C, round_bf16);
  t.group
      ->reduce_scatter_async(out, use.rows(), static_cast<size_t>(N) * C, DType::F32,
                             ReduceOp::kSum, after)
      ->wait(*after);
}

void table_lookup_backward(const Backend& be, const ShardedTable& t, const int32_t* ids,
                           const float* dout, int N, int C) {
  if (t.group == nullptr) {
    KILN_CHECK(t.a == 0, "table_lookup_backward: a whole table from row {}", t.a);
    be.embedding_backward(t.grad, dout, ids, N, C);
    return;
  }
  const int S = t.group->world_size();
  Stream* after = &be.compute_stream();
  SplitUse use(be, t, ids, N, C, "table_lookup_backward");
  t.group->all_gather_async(use.rows(), dout, static_cast<size_t>(N) * C, DType::F32, after)
      ->wait(*after);
  be.embedding_backward_part(t.grad, use.rows(), use.all_ids(), part_begin(t, C), part_len(t, C),
                             S * N, C);
}

}  // namespace kiln
