// The LM head and its loss over a table lent for it (sharded_table.h, TableUse::kHead). With the
// whole table it is Backend::cross_entropy. With the table split along its rows over a group
// (Megatron's vocabulary-parallel head: FSDP's shards of the table, each whole rows), every
// rank's rows of x and targets are gathered, each rank computes the logits of its own rows of the
// table for all of them, the ranks combine each row's max and sum of exponentials (two small
// all-reduces per chunk of rows), each adds its rows' gradient straight into its gradient rows,
// and a reduce-scatter of the (S * N, C) input gradients gives each rank dx. Neither the table
// nor its whole gradient is ever held.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/kernels/ops.h"
#include "kiln/model/sharded_table.h"

namespace kiln {

// loss_sum += the loss of this rank's N rows x (N, C) against targets (N; `targeted` of them
// not ignored), scaled by `scale` in the gradients; dx (N, C) = its input gradient; the table's
// gradient rows += theirs. With a group, a collective: every rank calls it with the same N.
void head_loss(const Backend& be, const ShardedTable& table, double* loss_sum, float* dx,
               const float* x, const int32_t* targets, int N, int targeted, int C, int V,
               float scale);

// The split loss's rows of logits at once, for `rows` rows (the group's tokens) over parts of
// at most `span` rows of the table: the same on every rank, so every rank runs the same chunks.
size_t vocab_loss_logit_rows(size_t rows, size_t span);

}  // namespace kiln
