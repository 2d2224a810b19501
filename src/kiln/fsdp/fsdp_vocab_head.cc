// Fsdp::head_cross_entropy: the LM head and its loss with the vocabulary split along the shards
// of the (V, C) table. The table is sharded by whole rows (shard_geometry.h): rank r holds rows
// [a, b) and no row is cut across ranks.
//
// Per chunk of the group's rows (all ranks' tokens, S * N): the logits (n, b - a) of this rank's
// rows by one product; then each row's max (all-reduce max) and sum of exponentials and target
// logit (all-reduce sum), the gradient in place of the logits, and the products of the backward:
// the part's gradient straight into the gradient shard, and this rank's share of dx for every
// row, which a reduce-scatter sums at the end. Two small all-reduces per chunk.
#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/fsdp/fsdp.h"

namespace kiln {

namespace {

// This rank's whole rows [a, b) of a (V, C) table sharded shard_size elements per rank.
struct VocabPart {
  int a = 0, b = 0;
  int rows() const { return b - a; }
};

VocabPart vocab_part(size_t shard_size, int rank, int V, int C) {
  const size_t per = shard_size / static_cast<size_t>(C);
  const size_t a = std::min(static_cast<size_t>(V), static_cast<size_t>(rank) * per);
  const size_t b = std::min(static_cast<size_t>(V), a + per);
  return {static_cast<int>(a), static_cast<int>(b)};
}

}  // namespace

bool splits_vocabulary(ShardStrategy strategy, size_t group, size_t table_numel, size_t tokens,
                       size_t C) {
  if (group == 1) return false;
  if (strategy != ShardStrategy::kFullShard && strategy != ShardStrategy::kShardGradOp) {
    return false;  // no_shard holds the table; hybrid_shard would miss the other nodes' rows
  }
  return group * tokens < table_numel / C;
}

bool Fsdp::vocab_path(const Unit& x, int N, int C) const {
  return splits_vocabulary(strategy_, static_cast<size_t>(shard_.world_size()), x.numel,
                           static_cast<size_t>(N), static_cast<size_t>(C));
}

void Fsdp::head_cross_entropy(int unit, double* loss_sum, float* dx, const float* x,
                              const int32_t* targets, int N, int targeted, int C, int V,
                              float scale) {
  Unit& u = trainable_unit(unit, "head_cross_entropy");
  KILN_CHECK(u.numel == static_cast<size_t>(V) * C && layout_.units()[unit].row_width == size_t(C),
             "head_cross_entropy: unit {} is not a ({}, {}) table", unit, V, C);
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

// The floats of a chunk's scratch: sums (rows, 2), then row_max (rows).
size_t vocab_head_scratch_floats(size_t chunk_rows) {
  return aligned(2 * chunk_rows) + aligned(chunk_rows);
}

// One chunk's buffers (device memory) and where its results go.
struct VocabChunk {
  const float* xs;         // (S * N, C) every rank's rows
  const int32_t* targets;  // (S * N)
  float* dxs;              // (S * N, C) this rank's share of every row's input gradient
  ConstDevPtr w;           // the rows [a, b), in the products' dtype
  float* dw;               // the gradient shard (rows [a, b))
  float* logits;           // (rows, b - a)
  float* row_max;          // (rows)
  float* sums;             // (rows, 2)
};

// Each row's max and (sum of exponentials, target logit) over the whole vocabulary: this
// rank's rows, then combined over the ranks.
void row_statistics(const Backend& be, Communicator& comm, const VocabPart& p, const VocabChunk& c,
                    const int32_t* targets, int n) {
  const int m = p.rows();
  Stream* after = &be.compute_stream();
  be.ce_part_max(c.row_max, c.logits, n, m, std::max(m, 1), false);
  comm.all_reduce_async(c.row_max, n, DType::F32, ReduceOp::kMax, after)->wait(*after);
  be.fill_zero(c.sums, sizeof(float) * 2 * n);
  if (m > 0) be.ce_part_sumexp(c.sums, c.logits, c.row_max, targets, p.a, n, m, m);
  comm.all_reduce_async(c.sums, 2 * static_cast<size_t>(n), DType::F32, ReduceOp::kSum, after)
      ->wait(*after);
}

// Rows [t0, t0 + n) of the group's rows; own: this rank's rows [own_begin, own_end), whose
// loss it adds.
void vocab_chunk(const Backend& be, Communicator& comm, const VocabPart& p, const VocabChunk& c,
                 int t0, int n, int own_begin, int own_end, int C, float scale, double* loss_sum) {
  const int m = p.rows();
  const float* xc = c.xs + static_cast<size_t>(t0) * C;
  float* dxc = c.dxs + static_cast<size_t>(t0) * C;
  const int32_t* tc = c.targets + t0;
  const ConstDevPtr no_bias(static_cast<const float*>(nullptr));
  if (m > 0) be.matmul_forward(c.logits, xc, c.w, no_bias, n, C, m);
  row_statistics(be, comm, p, c, tc, n);
  be.ce_part_grad(c.logits, loss_sum, c.row_max, c.sums, tc, p.a, n, m, std::max(m, 1), scale,
                  own_begin - t0, own_end - t0);
  if (m > 0) {
    be.matmul_backward(dxc, c.dw, nullptr, c.logits, xc, c.w, n, C, m, false);
  } else {
    be.fill_zero(dxc, sizeof(float) * n * C);
  }
}

}  // namespace

size_t vocab_head_logit_rows(size_t rows, size_t shard_size, size_t C) {
  return ce_chunk_rows(rows, shard_size / C);
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
  // The rows in the products' dtype.
  DeviceBuffer<float> w16;
  ConstDevPtr w(x.shard.data());
  if (gd == DType::BF16) {
    w16 = take(storage_floats(x.shard_size, gd));
    be_.cast_to_bf16(w16.data(), x.shard.data(), x.shard_size);
    w = ConstDevPtr(w16.data(), gd);
  }
  DeviceBuffer<float> dxs = take(Nt * C);
  const size_t rows = vocab_head_logit_rows(Nt, x.shard_size, C);
  DeviceBuffer<float> logits = take(rows * (x.shard_size / C));
  DeviceBuffer<float> scratch = take(vocab_head_scratch_floats(rows));
  float* s = scratch.data();
  VocabChunk c{xs.data(),
               reinterpret_cast<const int32_t*>(ts.data()),
               dxs.data(),
               w,
               x.shard_grad.data(),
               logits.data(),
               s + aligned(2 * rows),
               s};
  for (size_t t0 = 0; t0 < Nt; t0 += rows) {
    const int n = static_cast<int>(std::min(rows, Nt - t0));
    vocab_chunk(be_, shard_, p, c, static_cast<int>(t0), n, r * N, (r + 1) * N, C, scale, loss_sum);
  }
  shard_
      .reduce_scatter_async(dx, dxs.data(), static_cast<size_t>(N) * C, DType::F32, ReduceOp::kSum,
                            after)
      ->wait(*after);
  for (DeviceBuffer<float>* b : {&xs, &ts, &w16, &dxs, &logits, &scratch}) {
    if (b->size() > 0) give(std::move(*b));
  }
}

}  // namespace kiln
