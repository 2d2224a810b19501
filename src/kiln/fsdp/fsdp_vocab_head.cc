// Fsdp::head_cross_entropy: the LM head and its loss with the vocabulary split along the shards
// of the (V, C) table. Rank r holds the flat elements [lo, hi) of the table: the whole rows
// [a, b), the end of the row before a when lo falls inside a row (its start is on rank r - 1)
// and the start of row b when hi does (its end is on rank r + 1). Each row cut by a shard
// boundary belongs, for the softmax, to the rank where it starts; its logit is the sum of the
// two ranks' partial dot products.
//
// Per chunk of the group's rows (all ranks' tokens, S * N): logits (n, b - a) of the whole rows
// by one product, the partial logits of the two cut rows by a second one against a (2, C)
// "edge" table that holds this rank's pieces (zeros elsewhere), summed over the ranks in a
// (n, S - 1) all-reduce (column k - 1: the row cut by the boundary k * shard_size); then each
// row's max (all-reduce max) and sum of exponentials and target logit (all-reduce sum), the
// gradient in place of the logits, and the products of the backward: the part's gradient
// straight into the gradient shard, and this rank's share of dx for every row, which a
// reduce-scatter sums at the end.
#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/fsdp/fsdp.h"

namespace kiln {

namespace {

struct VocabPart {
  size_t lo = 0, hi = 0;  // elements of the table held, hi <= V * C
  int a = 0, b = 0;       // whole rows [a, b)
  int head_row = -1;      // the row whose end [head_col, C) is held first, -1: none
  int head_col = 0;
  int tail_row = -1;  // the row whose start [0, tail_cols) is held last, -1: none
  int tail_cols = 0;
  int full() const { return b - a; }
};

VocabPart vocab_part(size_t shard_size, int rank, int V, int C) {
  VocabPart p;
  const size_t table = static_cast<size_t>(V) * C;
  p.lo = std::min(table, static_cast<size_t>(rank) * shard_size);
  p.hi = std::min(table, p.lo + shard_size);
  if (p.lo == p.hi) return p;
  p.a = static_cast<int>((p.lo + C - 1) / C);
  p.b = static_cast<int>(p.hi / C);
  if (p.lo % C != 0) {
    p.head_row = static_cast<int>(p.lo / C);
    p.head_col = static_cast<int>(p.lo % C);
  }
  if (p.hi % C != 0) {
    p.tail_row = p.b;
    p.tail_cols = static_cast<int>(p.hi % C);
  }
  return p;
}

}  // namespace

bool splits_vocabulary(ShardStrategy strategy, size_t group, size_t shard_size, size_t table_numel,
                       size_t tokens, size_t C) {
  if (group == 1) return false;
  if (strategy != ShardStrategy::kFullShard && strategy != ShardStrategy::kShardGradOp) {
    return false;  // no_shard holds the table; hybrid_shard would miss the other nodes' rows
  }
  // A shard of at least a row: a row is cut at most once, so a rank holds at most two pieces.
  return shard_size >= C && group * tokens < table_numel / C;
}

bool Fsdp::vocab_path(const Unit& x, int N, int C) const {
  return splits_vocabulary(strategy_, static_cast<size_t>(shard_.world_size()), x.shard_size,
                           x.numel, static_cast<size_t>(N), static_cast<size_t>(C));
}

void Fsdp::head_cross_entropy(int unit, double* loss_sum, float* dx, const float* x,
                              const int32_t* targets, int N, int targeted, int C, int V,
                              float scale) {
  Unit& u = trainable_unit(unit, "head_cross_entropy");
  KILN_CHECK(u.numel == static_cast<size_t>(V) * C, "head_cross_entropy: unit {} is not ({}, {})",
             unit, V, C);
  if (vocab_path(u, N, C)) {
    vocab_head(u, loss_sum, dx, x, targets, N, C, V, scale);
    return;
  }
  const ConstDevPtr w = acquire(unit);
  be_.cross_entropy(loss_sum, dx, grad(unit), x, w, targets, N, targeted, C, V, scale);
  release(unit);
  grad_done(unit);
}

namespace {

// Floats, rounded up to 64 bytes, so that every piece of a shared buffer stays aligned.
size_t aligned(size_t floats) { return (floats + 15) / 16 * 16; }

// One chunk's buffers (device memory) and where its results go.
struct VocabChunk {
  const float* xs;         // (S * N, C) every rank's rows
  const int32_t* targets;  // (S * N)
  float* dxs;              // (S * N, C) this rank's share of every row's input gradient
  ConstDevPtr w;           // the whole rows [a, b), in the products' dtype
  ConstDevPtr edge;        // (2, C) the pieces of the cut rows, zeros elsewhere
  float* dw;               // the gradient shard at row a
  float* dedge;            // (2, C) the cut rows' gradient, added over chunks
  float* logits;           // (rows, b - a)
  float* pe;               // (rows, 2) the cut rows' logits, then their gradient
  float* row_max;          // (rows)
  float* sums;             // (rows, 2)
  float* cut;              // (rows, S - 1)
};

// The cut rows' logits summed over the ranks: each rank's piece goes to the column of its
// boundary, the all-reduce adds the two pieces, and the sums come back into pe.
void complete_cut_rows(const Backend& be, Communicator& comm, const VocabPart& p,
                       const VocabChunk& c, int n) {
  const int S = comm.world_size(), r = comm.rank();
  const size_t pitch = sizeof(float) * (S - 1), pe_pitch = 2 * sizeof(float);
  be.fill_zero(c.cut, pitch * n);
  if (p.head_row >= 0) be.copy_2d(c.cut + (r - 1), pitch, c.pe, pe_pitch, sizeof(float), n);
  if (p.tail_row >= 0) be.copy_2d(c.cut + r, pitch, c.pe + 1, pe_pitch, sizeof(float), n);
  Stream* after = &be.compute_stream();
  comm.all_reduce_async(c.cut, static_cast<size_t>(n) * (S - 1), DType::F32, ReduceOp::kSum, after)
      ->wait(*after);
  if (p.head_row >= 0) be.copy_2d(c.pe, pe_pitch, c.cut + (r - 1), pitch, sizeof(float), n);
  if (p.tail_row >= 0) be.copy_2d(c.pe + 1, pe_pitch, c.cut + r, pitch, sizeof(float), n);
}

// Each row's max and (sum of exponentials, target logit) over the whole vocabulary: this
// rank's whole rows and the cut row that starts here, then combined over the ranks.
void row_statistics(const Backend& be, Communicator& comm, const VocabPart& p, const VocabChunk& c,
                    const int32_t* targets, int n) {
  const int nf = p.full();
  Stream* after = &be.compute_stream();
  be.ce_part_max(c.row_max, c.logits, n, nf, std::max(nf, 1), false);
  if (p.tail_row >= 0) be.ce_part_max(c.row_max, c.pe + 1, n, 1, 2, true);
  comm.all_reduce_async(c.row_max, n, DType::F32, ReduceOp::kMax, after)->wait(*after);
  be.fill_zero(c.sums, sizeof(float) * 2 * n);
  if (nf > 0) be.ce_part_sumexp(c.sums, c.logits, c.row_max, targets, p.a, n, nf, nf);
  if (p.tail_row >= 0) be.ce_part_sumexp(c.sums, c.pe + 1, c.row_max, targets, p.tail_row, n, 1, 2);
  comm.all_reduce_async(c.sums, 2 * static_cast<size_t>(n), DType::F32, ReduceOp::kSum, after)
      ->wait(*after);
}

// Rows [t0, t0 + n) of the group's rows; own: this rank's rows [own_begin, own_end), whose
// loss it adds.
void vocab_chunk(const Backend& be, Communicator& comm, const VocabPart& p, const VocabChunk& c,
                 int t0, int n, int own_begin, int own_end, int C, float scale, double* loss_sum) {
  const int nf = p.full();
  const float* xc = c.xs + static_cast<size_t>(t0) * C;
  float* dxc = c.dxs + static_cast<size_t>(t0) * C;
  const int32_t* tc = c.targets + t0;
  const ConstDevPtr no_bias(static_cast<const float*>(nullptr));
  if (nf > 0) be.matmul_forward(c.logits, xc, c.w, no_bias, n, C, nf);
  be.matmul_forward(c.pe, xc, c.edge, no_bias, n, C, 2);
  complete_cut_rows(be, comm, p, c, n);
  row_statistics(be, comm, p, c, tc, n);
  be.ce_part_grad(c.logits, loss_sum, c.row_max, c.sums, tc, p.a, n, nf, std::max(nf, 1), scale,
                  own_begin - t0, own_end - t0);
  if (p.head_row >= 0) {
    be.ce_part_grad(c.pe, nullptr, c.row_max, c.sums, tc, p.head_row, n, 1, 2, scale, 0, 0);
  }
  if (p.tail_row >= 0) {
    be.ce_part_grad(c.pe + 1, nullptr, c.row_max, c.sums, tc, p.tail_row, n, 1, 2, scale, 0, 0);
  }
  if (nf > 0) {
    be.matmul_backward(dxc, c.dw, nullptr, c.logits, xc, c.w, n, C, nf, false);
  } else {
    be.fill_zero(dxc, sizeof(float) * n * C);
  }
  be.matmul_backward(dxc, c.dedge, nullptr, c.pe, xc, c.edge, n, C, 2, true);
}

}  // namespace

size_t vocab_head_logit_rows(size_t rows, size_t shard_size, size_t C) {
  return ce_chunk_rows(rows, shard_size / C);
}

size_t vocab_head_scratch_floats(size_t chunk_rows, size_t group_size) {
  return 2 * aligned(2 * chunk_rows) + aligned(chunk_rows) + aligned(chunk_rows * (group_size - 1));
}

void Fsdp::vocab_head(Unit& x, double* loss_sum, float* dx, const float* xin,
                      const int32_t* targets, int N, int C, int V, float scale) {
  const int S = shard_.world_size(), r = shard_.rank();
  const VocabPart p = vocab_part(x.shard_size, r, V, C);
  const size_t Nt = static_cast<size_t>(S) * N;
  const DType gd = gather_dtype_;
  Stream* after = &be_.compute_stream();
  DeviceBuffer<float> xs = take(Nt * C);
  shard_.all_gather_async(xs.data(), xin, static_cast<size_t>(N) * C, DType::F32, after)
      ->wait(*after);
  DeviceBuffer<float> ts = gather_ids(targets, N);
  // The part in the products' dtype, and the edge table of its cut rows' pieces.
  DeviceBuffer<float> w16;
  ConstDevPtr w(x.shard.data());
  if (gd == DType::BF16) {
    w16 = take(storage_floats(x.shard_size, gd));
    be_.cast_to_bf16(w16.data(), x.shard.data(), x.shard_size);
    w = ConstDevPtr(w16.data(), gd);
  }
  DeviceBuffer<float> edge = take(storage_floats(2 * static_cast<size_t>(C), gd));
  be_.fill_zero(edge.data(), edge.bytes());
  const ConstDevPtr e(edge.data(), gd);
  const size_t es = dtype_size(gd);
  auto* e8 = reinterpret_cast<char*>(edge.data());
  if (p.head_row >= 0) {
    be_.copy_on_device(e8 + p.head_col * es, w.data, (C - p.head_col) * es);
  }
  if (p.tail_row >= 0) {
    be_.copy_on_device(e8 + C * es, w.at(static_cast<size_t>(p.tail_row) * C - p.lo).data,
                       p.tail_cols * es);
  }
  DeviceBuffer<float> dedge = take(2 * static_cast<size_t>(C));
  dedge.zero();
  DeviceBuffer<float> dxs = take(Nt * C);
  const size_t rows = vocab_head_logit_rows(Nt, x.shard_size, C);
  DeviceBuffer<float> logits = take(rows * (x.shard_size / C));
  DeviceBuffer<float> scratch = take(vocab_head_scratch_floats(rows, S));
  float* s = scratch.data();
  const size_t at_a = p.full() > 0 ? static_cast<size_t>(p.a) * C - p.lo : 0;
  VocabChunk c{xs.data(),
               reinterpret_cast<const int32_t*>(ts.data()),
               dxs.data(),
               w.at(at_a),
               e,
               x.shard_grad.data() + at_a,
               dedge.data(),
               logits.data(),
               s,
               s + aligned(2 * rows),
               s + aligned(2 * rows) + aligned(rows),
               s + 2 * aligned(2 * rows) + aligned(rows)};
  for (size_t t0 = 0; t0 < Nt; t0 += rows) {
    const int n = static_cast<int>(std::min(rows, Nt - t0));
    vocab_chunk(be_, shard_, p, c, static_cast<int>(t0), n, r * N, (r + 1) * N, C, scale, loss_sum);
  }
  // The cut rows' pieces of the gradient.
  float* g = x.shard_grad.data();
  if (p.head_row >= 0) be_.add(g, g, dedge.data() + p.head_col, C - p.head_col);
  if (p.tail_row >= 0) {
    float* gt = g + (static_cast<size_t>(p.tail_row) * C - p.lo);
    be_.add(gt, gt, dedge.data() + C, p.tail_cols);
  }
  shard_
      .reduce_scatter_async(dx, dxs.data(), static_cast<size_t>(N) * C, DType::F32, ReduceOp::kSum,
                            after)
      ->wait(*after);
  for (DeviceBuffer<float>* b : {&xs, &ts, &w16, &edge, &dedge, &dxs, &logits, &scratch}) {
    if (b->size() > 0) give(std::move(*b));
  }
}

}  // namespace kiln
