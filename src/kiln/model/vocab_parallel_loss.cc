// head_loss (vocab_parallel_loss.h). Per chunk of the group's rows (all ranks' tokens, S * N):
// the logits (n, b - a) of this rank's rows by one product; then each row's max (all-reduce
// max) and sum of exponentials and target logit (all-reduce sum), the gradient in place of the
// logits, and the products of the backward: the part's gradient straight into the gradient
// rows, and this rank's share of dx for every row, which a reduce-scatter sums at the end.
#include "kiln/model/vocab_parallel_loss.h"

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/comm/communicator.h"

namespace kiln {

namespace {

// Floats, rounded up to 64 bytes, so that every piece of a shared buffer stays aligned.
size_t aligned(size_t floats) { return (floats + 15) / 16 * 16; }

// The floats of a chunk's scratch: sums (rows, 2), then row_max (rows).
size_t scratch_floats(size_t chunk_rows) { return aligned(2 * chunk_rows) + aligned(chunk_rows); }

// One chunk's buffers (device memory) and where its results go.
struct VocabChunk {
  const float* xs;         // (S * N, C) every rank's rows
  const int32_t* targets;  // (S * N)
  float* dxs;              // (S * N, C) this rank's share of every row's input gradient
  float* logits;           // (rows, b - a)
  float* row_max;          // (rows)
  float* sums;             // (rows, 2)
};

// Each row's max and (sum of exponentials, target logit) over the whole vocabulary: this
// rank's rows, then combined over the ranks.
void row_statistics(const Backend& be, const ShardedTable& t, const VocabChunk& c,
                    const int32_t* targets, int n) {
  const int m = t.b - t.a;
  Stream* after = &be.compute_stream();
  be.ce_part_max(c.row_max, c.logits, n, m, std::max(m, 1), false);
  t.group->all_reduce_async(c.row_max, n, DType::F32, ReduceOp::kMax, after)->wait(*after);
  be.fill_zero(c.sums, sizeof(float) * 2 * n);
  if (m > 0) be.ce_part_sumexp(c.sums, c.logits, c.row_max, targets, t.a, n, m, m);
  t.group->all_reduce_async(c.sums, 2 * static_cast<size_t>(n), DType::F32, ReduceOp::kSum, after)
      ->wait(*after);
}

// Rows [t0, t0 + n) of the group's rows; own: this rank's rows [own_begin, own_end), whose
// loss it adds.
void vocab_chunk(const Backend& be, const ShardedTable& t, const VocabChunk& c, int t0, int n,
                 int own_begin, int own_end, int C, float scale, double* loss_sum) {
  const int m = t.b - t.a;
  const float* xc = c.xs + static_cast<size_t>(t0) * C;
  float* dxc = c.dxs + static_cast<size_t>(t0) * C;
  const int32_t* tc = c.targets + t0;
  const ConstDevPtr no_bias(static_cast<const float*>(nullptr));
  if (m > 0) be.matmul_forward(c.logits, xc, t.rows, no_bias, n, C, m);
  row_statistics(be, t, c, tc, n);
  be.ce_part_grad(c.logits, loss_sum, c.row_max, c.sums, tc, t.a, n, m, std::max(m, 1), scale,
                  nullptr, own_begin - t0, own_end - t0);
  if (m > 0) {
    be.matmul_backward(dxc, t.grad, nullptr, c.logits, xc, t.rows, n, C, m, false);
  } else {
    be.fill_zero(dxc, sizeof(float) * n * C);
  }
}

void split_loss(const Backend& be, const ShardedTable& lent, double* loss_sum, float* dx,
                const float* x, const int32_t* targets, int N, int C, float scale) {
  DeviceBuffer<float> rows16;
  if (const size_t n = product_copy_floats(be, lent, C)) rows16 = lent.scratch->take(n);
  ShardedTable t = lent;
  t.rows = product_rows(be, lent, C, rows16.data());
  Communicator& g = *t.group;
  ScratchLender& lend = *t.scratch;
  const int S = g.world_size(), r = g.rank();
  const size_t Nt = static_cast<size_t>(S) * N;
  Stream* after = &be.compute_stream();
  DeviceBuffer<float> xs = lend.take(Nt * C);
  g.all_gather_async(xs.data(), x, static_cast<size_t>(N) * C, DType::F32, after)->wait(*after);
  DeviceBuffer<float> ts = gather_table_ids(be, t, targets, N);
  DeviceBuffer<float> dxs = lend.take(Nt * C);
  const size_t rows = vocab_loss_logit_rows(Nt, static_cast<size_t>(t.span));
  DeviceBuffer<float> logits = lend.take(rows * static_cast<size_t>(t.span));
  DeviceBuffer<float> scratch = lend.take(scratch_floats(rows));
  float* s = scratch.data();
  const VocabChunk c{xs.data(),
                     reinterpret_cast<const int32_t*>(ts.data()),
                     dxs.data(),
                     logits.data(),
                     s + aligned(2 * rows),
                     s};
  for (size_t t0 = 0; t0 < Nt; t0 += rows) {
    const int n = static_cast<int>(std::min(rows, Nt - t0));
    vocab_chunk(be, t, c, static_cast<int>(t0), n, r * N, (r + 1) * N, C, scale, loss_sum);
  }
  g.reduce_scatter_async(dx, dxs.data(), static_cast<size_t>(N) * C, DType::F32, ReduceOp::kSum,
                         after)
      ->wait(*after);
  // Pooled buffers are reused in stream order.
  for (DeviceBuffer<float>* b : {&xs, &ts, &dxs, &logits, &scratch}) lend.give(std::move(*b));
  if (rows16.size() > 0) lend.give(std::move(rows16));
}

}  // namespace

size_t vocab_loss_logit_rows(size_t rows, size_t span) { return ce_chunk_rows(rows, span); }

void head_loss(const Backend& be, const ShardedTable& t, double* loss_sum, float* dx,
               const float* x, const int32_t* targets, int N, int targeted, int C, int V,
               float scale) {
  if (t.group == nullptr) {
    KILN_CHECK(t.a == 0 && t.b == V, "head_loss: a whole table of {} rows has rows [{}, {})", V,
               t.a, t.b);
    be.cross_entropy(loss_sum, dx, t.grad, x, t.rows, targets, N, targeted, C, V, scale);
    return;
  }
  KILN_CHECK(t.scratch != nullptr && 0 <= t.a && t.a <= t.b && t.b <= V && t.b - t.a <= t.span,
             "head_loss: rows [{}, {}) of a table of {} rows split by {}", t.a, t.b, V, t.span);
  split_loss(be, t, loss_sum, dx, x, targets, N, C, scale);
}

}  // namespace kiln
