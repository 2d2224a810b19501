// A (V, C) table unit (the embedding, an untied LM head: ParamUnit::row_width = C) as the ranks
// hold it, and the model's one piece of code for a table split along its rows: the embedding's
// lookup and its backward here, the LM head's loss in vocab_parallel_loss.h. UnitAccess lends
// the table for one use (acquire_table) as a ShardedTable: the whole table (ParamStore; Fsdp
// when it gathers it), or this rank's whole rows [a, b) with the group that holds the others and
// buffers for the call (Fsdp's shard, when its one predicate, fsdp.h's splits_table, says the
// table is split). Split, each use is a collective (every rank of the group calls it with the
// same N) and neither the table nor its whole gradient is ever held:
//   lookup:   every rank's ids (S * N) are gathered, each rank looks them all up in its own rows
//             (zeros for a row another rank holds) and a reduce-scatter of those (S * N, C) rows
//             sums each rank's (N, C)
//   backward: every rank's ids and dout rows are gathered and each rank adds those that fall in
//             its rows straight into its gradient rows
//   loss:     Megatron's vocabulary-parallel head (vocab_parallel_loss.h)
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/ops.h"

namespace kiln {

class Communicator;

// Device buffers lent for the length of one call (from FSDP's pool, where the memory plan counts
// them as communication buffers); every take is given back before the call returns.
class ScratchLender {
 public:
  virtual ~ScratchLender() = default;
  virtual DeviceBuffer<float> take(size_t n) = 0;  // n floats
  virtual void give(DeviceBuffer<float> b) = 0;
};

// A lender with a pool of its own (buffers by size, kept between calls): the buffers of a whole
// table's uses, which no FSDP pool lends (the decoder's LM head), so that a warm step allocates
// nothing. Contents are undefined when a buffer is reused.
class PooledScratch final : public ScratchLender {
 public:
  explicit PooledScratch(const Backend& be) : pool_(be) {}
  DeviceBuffer<float> take(size_t n) override { return pool_.take(n); }
  void give(DeviceBuffer<float> b) override { pool_.give(std::move(b)); }

 private:
  DevicePool pool_;
};

// What a table is lent for (UnitAccess::acquire_table), in a training micro-batch.
enum class TableUse {
  kLookup,          // table_lookup: the rows, no gradient (a frozen table too)
  kLookupBackward,  // table_lookup_backward: the gradient rows, no parameters
  kHead,            // head_loss (vocab_parallel_loss.h): the rows and their gradient
};

// A table as lent for one use. With no group, the whole table: rows [0, V), read by this rank's
// tokens alone. With a group, this rank's whole rows [a, b) of a table split along its rows over
// the group's ranks (every rank's part holds `span` rows or fewer, the last ranks' fewer or
// none), met by every rank's tokens, and `scratch` lends the call's buffers. One lending with a
// group is not split: for kLookupBackward only, FSDP's no_shard lends its whole table (a = 0,
// b = V on every rank) once the table's gradient has been all-reduced in this micro-step (a
// tied head's part), so that every rank adds every rank's rows into it.
struct ShardedTable {
  // (b - a, C): in the backend's activation_dtype(), as UnitAccess::acquire gives a unit; or
  // fp32 rows (a split table's shard, a whole table stored in fp32), which the lookup rounds to
  // the activation dtype as a gathered table is rounded, and the loss copies into it.
  ConstDevPtr rows{static_cast<const float*>(nullptr)};
  float* grad = nullptr;             // (b - a, C) fp32, accumulated with +=
  int a = 0, b = 0;                  // this rank's rows of the table
  int span = 0;                      // rows of the largest rank's part (b - a with no group)
  Communicator* group = nullptr;     // the ranks whose tokens meet these rows; nullptr: this rank's
  ScratchLender* scratch = nullptr;  // set with a group
};

// The whole table of V rows, `rows` and its gradient `grad` (either may be null, as the use
// needs), with no group: what a ParamStore, or an Fsdp that gathers the table, lends.
inline ShardedTable whole_table(ConstDevPtr rows, float* grad, int V) {
  ShardedTable t;
  t.rows = rows;
  t.grad = grad;
  t.b = t.span = V;
  return t;
}

// Every rank's n 4-byte elements (ids, floats, or doubles as two each) in rank order, (S * n) in
// a buffer from `lend` that the caller gives back. A collective over `group`.
DeviceBuffer<float> gather_elements(const Backend& be, Communicator& group, ScratchLender& lend,
                                    const void* mine, size_t n);

// Every rank's ids (N each) in rank order, (S * N) in a buffer from table.scratch that the caller
// gives back: the first step of each split use. A collective over table.group.
DeviceBuffer<float> gather_table_ids(const Backend& be, const ShardedTable& table,
                                     const int32_t* ids, int N);

// The table's rows as the head's products read them, in the backend's activation dtype: the rows
// themselves when they are in it (product_copy_floats() is then 0), else (fp32 rows under bf16
// products: a split table's shard) a bf16 copy rounded into `copy`, product_copy_floats() floats.
size_t product_copy_floats(const Backend& be, const ShardedTable& table, int C);
ConstDevPtr product_rows(const Backend& be, const ShardedTable& table, int C, float* copy);

// out (N, C) = the table's rows at ids (N), with the values acquire() of the whole table would
// give (bf16-rounded under a bf16 activation dtype). With a group, a collective.
void table_lookup(const Backend& be, const ShardedTable& table, const int32_t* ids, int N, int C,
                  float* out);

// The lookup's backward: the table's gradient rows += dout (N, C) at ids (N). With a group, a
// collective.
void table_lookup_backward(const Backend& be, const ShardedTable& table, const int32_t* ids,
                           const float* dout, int N, int C);

}  // namespace kiln
