// preference_head_loss and head_sequence_logps (preference_head.h): the passes over chunks of the
// group's rows, on the backend's split-vocabulary ops (ce_part_*), with or without a group.
#include "kiln/model/preference_head.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/comm/communicator.h"
#include "kiln/model/vocab_parallel_loss.h"

namespace kiln {

namespace {

// The buffers of one call, lent by the table's scratch (FSDP's pool, or the decoder's for a
// whole table); all given back, in stream order, when the call ends.
class CallBuffers {
 public:
  explicit CallBuffers(const ShardedTable& t) : lend_(lent_by(t)) {}
  ~CallBuffers() {
    for (DeviceBuffer<float>& b : held_) lend_.give(std::move(b));
  }
  float* take(size_t n) { return keep(lend_.take(std::max<size_t>(n, 1))); }
  float* keep(DeviceBuffer<float> b) {
    held_.push_back(std::move(b));
    return held_.back().data();
  }

 private:
  static ScratchLender& lent_by(const ShardedTable& t) {
    KILN_CHECK(t.scratch != nullptr, "preference head: a table lent without its buffers' lender");
    return *t.scratch;
  }
  ScratchLender& lend_;
  std::vector<DeviceBuffer<float>> held_;
};

// The rows both passes run over: those with a target only (a prompt's rows take no part),
// compacted by a gather (embedding_forward) and scattered back by embedding_backward; with a
// group, each rank's compacted rows padded to the group's largest count (the padding has no
// target) and gathered, rank q's at [q * own, (q + 1) * own). The group's layout is S * B * T
// rows, rank q's from q * B * T: sequence_logps and preference_loss read it.
struct HeadRows {
  const float* x = nullptr;              // (rows, C)
  const int32_t* targets = nullptr;      // (rows)
  const int32_t* index = nullptr;        // (rows) each row's index in its rank's batch
  const int32_t* own_index = nullptr;    // (own) this rank's
  const int32_t* all_targets = nullptr;  // (S * B * T) the group's layout's targets
  const int32_t* bounds = nullptr;       // (S, B, 2) each rank's sequences' rows, in its part
  float* dx = nullptr;                   // (rows, C): pass 2's input gradients
  const double* ref_seq = nullptr;       // (S * B, 2) or null
  size_t rows = 0, own = 0;              // compacted rows of the group and of each rank
  int ranks = 1, rank = 0, N = 0;        // the group's ranks, this one, B * T
  // Each rank's sequences' rows with a target, (ranks, B) on the host, the same on every rank;
  // empty when not known (a whole table only).
  std::vector<double> counts;
  // Compacted rows [t0, t0 + n) (one float a row) scattered into their ranks' parts of a layout
  // array, or gathered from them.
  void to_layout(const Backend& be, float* layout, const float* compact, size_t t0,
                 size_t n) const {
    by_rank(t0, n, [&](size_t q, size_t lo, int m) {
      be.embedding_backward(layout + q * N, compact + lo, index + lo, m, 1);
    });
  }
  void from_layout(const Backend& be, float* compact, const float* layout, size_t t0,
                   size_t n) const {
    by_rank(t0, n, [&](size_t q, size_t lo, int m) {
      be.embedding_forward(compact + lo, index + lo, ConstDevPtr(layout + q * N), m, 1);
    });
  }
  // f(rank, first row, rows) for each rank's part of rows [t0, t0 + n).
  template <typename F>
  void by_rank(size_t t0, size_t n, F f) const {
    for (size_t q = 0; q < static_cast<size_t>(ranks); ++q) {
      const size_t lo = std::max(t0, q * own), hi = std::min(t0 + n, (q + 1) * own);
      if (lo < hi) f(q, lo, static_cast<int>(hi - lo));
    }
  }
};

// Every rank's sequences' rows with a target (HeadRows::counts): one small all-reduce with a
// group, which needs them.
std::vector<double> sequence_counts(const ShardedTable& t, const TargetRows& rows, int B) {
  const bool known = rows.per_sequence.size() == static_cast<size_t>(B);
  if (t.group == nullptr) {
    return known ? std::vector<double>(rows.per_sequence.begin(), rows.per_sequence.end())
                 : std::vector<double>{};
  }
  KILN_CHECK(known, "preference head: a split table's rows without their sequences' counts");
  std::vector<double> c(static_cast<size_t>(t.group->world_size()) * B, 0.0);
  std::copy(rows.per_sequence.begin(), rows.per_sequence.end(),
            c.begin() + static_cast<ptrdiff_t>(t.group->rank()) * B);
  t.group->all_reduce(c.data(), c.size(), ReduceOp::kSum);
  return c;
}

// Each rank's compacted rows, padded to the group's largest count (at least 1).
size_t padded_rows(const std::vector<double>& counts, int B, int count) {
  double most = counts.empty() ? count : 0;
  for (size_t q = 0; q < counts.size(); q += B) {
    most = std::max(most, std::accumulate(counts.begin() + q, counts.begin() + q + B, 0.0));
  }
  return std::max<size_t>(static_cast<size_t>(most), 1);
}

// Every rank's `n` 4-byte elements, gathered (sharded_table.h), held for the call.
const void* gathered(const Backend& be, const ShardedTable& t, CallBuffers& buf, const void* mine,
                     size_t n) {
  return buf.keep(gather_elements(be, *t.group, *t.scratch, mine, n));
}

HeadRows head_rows(const Backend& be, const ShardedTable& t, CallBuffers& buf,
                   const TargetRows& target_rows, const float* x, const int32_t* targets,
                   const double* ref_seq, bool grad, int B, int T, int C) {
  HeadRows r;
  r.N = B * T;
  r.counts = sequence_counts(t, target_rows, B);
  r.own = padded_rows(r.counts, B, target_rows.count);
  KILN_CHECK(r.own <= static_cast<size_t>(r.N), "preference head: {} rows of {}", r.own, r.N);
  r.own_index = target_rows.index;
  float* xc = buf.take(r.own * C);
  be.embedding_forward(xc, r.own_index, ConstDevPtr(x), static_cast<int>(r.own), C);
  if (t.group == nullptr) {
    r.x = xc;
    r.index = target_rows.index;
    r.targets = target_rows.targets;
    r.all_targets = targets;
    r.bounds = target_rows.bounds;
    r.ref_seq = ref_seq;
  } else {
    Communicator& g = *t.group;
    r.ranks = g.world_size();
    r.rank = g.rank();
    r.x = static_cast<const float*>(gathered(be, t, buf, xc, r.own * C));
    r.index = static_cast<const int32_t*>(gathered(be, t, buf, target_rows.index, r.own));
    r.targets = static_cast<const int32_t*>(gathered(be, t, buf, target_rows.targets, r.own));
    r.all_targets = static_cast<const int32_t*>(gathered(be, t, buf, targets, r.N));
    if (grad) {  // the pairs' weights only (head_sequence_logps reads its own rank's bounds)
      r.bounds = static_cast<const int32_t*>(gathered(be, t, buf, target_rows.bounds, 2 * B));
    }
    if (ref_seq != nullptr) {
      r.ref_seq =
          static_cast<const double*>(gathered(be, t, buf, ref_seq, static_cast<size_t>(B) * 4));
    }
  }
  r.rows = static_cast<size_t>(r.ranks) * r.own;
  if (grad) r.dx = buf.take(r.rows * C);
  return r;
}

// Both passes' state: the rows, the table's, and each row's statistics, loss and weight.
struct Passes {
  const Backend& be;
  const ShardedTable& t;
  ConstDevPtr w;  // (b - a, C) in the products' dtype
  HeadRows r;
  int C = 0;
  size_t chunk = 0;  // rows of logits at once
  float* logits = nullptr;
  float* row_max = nullptr;   // (rows)
  float* sums = nullptr;      // (rows, 2)
  float* row_loss = nullptr;  // (rows)
  int m() const { return t.b - t.a; }
  int ld() const { return std::max(m(), 1); }

  // Rows [t0, t0 + n)'s logits against this rank's table rows.
  void logits_of(size_t t0, int n) {
    if (m() > 0) {
      be.matmul_forward(logits, r.x + t0 * C, w, ConstDevPtr(static_cast<const float*>(nullptr)), n,
                        C, m());
    }
  }
  // Rows [t0, t0 + n)'s statistics over the whole vocabulary from their logits, and their loss.
  void row_stats(size_t t0, int n) {
    Stream* after = &be.compute_stream();
    float* mx = row_max + t0;
    float* s = sums + 2 * t0;
    be.ce_part_max(mx, logits, n, m(), ld(), false);
    if (t.group != nullptr) {
      t.group->all_reduce_async(mx, n, DType::F32, ReduceOp::kMax, after)->wait(*after);
    }
    be.fill_zero(s, sizeof(float) * 2 * n);
    if (m() > 0) be.ce_part_sumexp(s, logits, mx, r.targets + t0, t.a, n, m(), m());
    if (t.group != nullptr) {
      t.group->all_reduce_async(s, 2 * static_cast<size_t>(n), DType::F32, ReduceOp::kSum, after)
          ->wait(*after);
    }
    be.ce_part_row_loss(row_loss + t0, mx, s, r.targets + t0, n);
  }
  // Pass 1: each row's statistics and loss; with `with_dx`, also each row's dx before its
  // weight (input_grad).
  void row_losses(bool with_dx) {
    for (size_t t0 = 0; t0 < r.rows; t0 += chunk) {
      const int n = static_cast<int>(std::min(chunk, r.rows - t0));
      logits_of(t0, n);
      row_stats(t0, n);
      if (with_dx) input_grad(t0, n, nullptr);
    }
  }
  // Each row's loss in the group's layout (zero where no row has a target).
  float* layout_losses(CallBuffers& buf) {
    const size_t all = static_cast<size_t>(r.ranks) * r.N;
    float* layout = buf.take(all);
    be.fill_zero(layout, all * sizeof(float));
    r.to_layout(be, layout, row_loss, 0, r.rows);
    return layout;
  }
  // Rows [t0, t0 + n) from their logits: their cross-entropy gradient, times each row's weight
  // when given, into dx and the table's gradient rows.
  void input_grad(size_t t0, int n, const float* row_weight) {
    be.ce_part_grad(logits, nullptr, row_max + t0, sums + 2 * t0, r.targets + t0, t.a, n, m(), ld(),
                    1.0f, row_weight != nullptr ? row_weight + t0 : nullptr, 0, 0);
    float* dxc = r.dx + t0 * C;
    if (m() > 0) {
      be.matmul_backward(dxc, t.grad, nullptr, logits, r.x + t0 * C, w, n, C, m(), false);
    } else {
      be.fill_zero(dxc, sizeof(float) * n * C);
    }
  }
  // Pass 2: the logits again, each row's gradient times its weight.
  void weighted_backward(const float* row_weight) {
    for (size_t t0 = 0; t0 < r.rows; t0 += chunk) {
      const int n = static_cast<int>(std::min(chunk, r.rows - t0));
      logits_of(t0, n);
      input_grad(t0, n, row_weight);
    }
  }
};

Passes make_passes(const Backend& be, const ShardedTable& t, CallBuffers& buf, HeadRows rows, int C,
                   int V) {
  KILN_CHECK(0 <= t.a && t.a <= t.b && t.b <= V && t.b - t.a <= t.span,
             "preference head: rows [{}, {}) of a table of {} rows split by {}", t.a, t.b, V,
             t.span);
  const size_t copy = product_copy_floats(be, t, C);
  Passes p{be, t, product_rows(be, t, C, copy > 0 ? buf.take(copy) : nullptr), rows, C};
  p.chunk = vocab_loss_logit_rows(rows.rows, static_cast<size_t>(std::max(t.span, 1)));
  p.logits = buf.take(p.chunk * static_cast<size_t>(std::max(t.span, 1)));
  p.row_max = buf.take(rows.rows);
  p.sums = buf.take(2 * rows.rows);
  p.row_loss = buf.take(rows.rows);
  return p;
}

// The group's layout of per-row values for its pairs: the rows' losses in, each sequence's
// log-probability and length, each row's weight out (zero outside the sequences).
struct PairLayout {
  const Backend& be;
  const HeadRows& r;
  int B;  // sequences of each rank
  size_t all = 0;
  float* losses = nullptr;  // (S * B * T)
  float* weight = nullptr;  // (S * B * T)
  double* seq = nullptr;    // (S * B, 2)
  PairLayout(const Backend& be, const HeadRows& r, CallBuffers& buf, int B)
      : be(be), r(r), B(B), all(static_cast<size_t>(r.ranks) * r.N) {
    losses = buf.take(all);
    weight = buf.take(all);
    seq = reinterpret_cast<double*>(buf.take(4 * static_cast<size_t>(r.ranks) * B));
    be.fill_zero(losses, all * sizeof(float));
    be.fill_zero(weight, all * sizeof(float));
    be.fill_zero(seq, 2 * static_cast<size_t>(r.ranks) * B * sizeof(double));
  }
  // The group's pairs [g0, g1) (rank q's pair p is q * B / 2 + p): their sequences'
  // log-probabilities from the losses, then their rows' weights, and this rank's pairs' sums.
  // Each rank's sequences are bounded within its part of the layout.
  void weigh(const PreferenceHead& h, int g0, int g1) const {
    const int per = B / 2;
    for (int q = g0 / std::max(per, 1); q < r.ranks && q * per < g1; ++q) {
      const int p0 = std::max(g0 - q * per, 0), p1 = std::min(g1 - q * per, per);
      if (p0 >= p1) continue;
      const size_t part = static_cast<size_t>(q) * r.N, s0 = static_cast<size_t>(q) * B + 2 * p0;
      const int S = 2 * (p1 - p0);
      be.sequence_logps(seq + 2 * s0, losses + part, r.all_targets + part, r.bounds + 2 * s0, S);
      be.preference_loss(weight + part, q == r.rank ? h.sums : nullptr, seq + 2 * s0,
                         r.ref_seq != nullptr ? r.ref_seq + 2 * s0 : nullptr, r.bounds + 2 * s0, S,
                         h.terms, 0, S / 2);
    }
  }
};

// Pass 1 over all the rows, the group's sequences' log-probabilities, every row's weight, then
// pass 2. A table without a gradient (`frozen`: LoRA's head) needs its logits once: pass 1
// keeps each row's dx before its weight, which then scales the row (dx is linear in it).
void two_passes(Passes& p, const HeadRows& rows, const PreferenceHead& h, CallBuffers& buf,
                bool frozen, int B) {
  const Backend& be = p.be;
  p.row_losses(frozen);
  PairLayout pairs(be, rows, buf, B);
  rows.to_layout(be, pairs.losses, p.row_loss, 0, rows.rows);
  pairs.weigh(h, 0, rows.ranks * B / 2);
  float* row_weight = buf.take(rows.rows);
  rows.from_layout(be, row_weight, pairs.weight, 0, rows.rows);
  if (frozen) {
    be.scale_rows(rows.dx, row_weight, static_cast<int>(rows.rows), p.C);
  } else {
    p.weighted_backward(row_weight);
  }
}

// The group's pairs [g0, g1) (rank q's pair p is q * B / 2 + p), whose compacted rows (with
// the padding of the ranks they end) are [t0, t0 + n).
struct PairChunk {
  int g0 = 0, g1 = 0;
  size_t t0 = 0;
  int n = 0;
};

// The group's pairs in chunks of whole pairs of at most `chunk` rows each, a rank's padding rows
// going with its last pair; none when a pair's rows exceed it or the counts are not known (the
// two passes then). Every rank computes the same chunks.
std::vector<PairChunk> pair_chunks(const HeadRows& r, int B, size_t chunk) {
  std::vector<PairChunk> out;
  if (r.counts.empty()) return out;
  for (int q = 0; q < r.ranks; ++q) {
    size_t t = q * r.own;
    for (int p = 0; p < B / 2; ++p) {
      const double* c = r.counts.data() + static_cast<size_t>(q) * B + 2 * p;
      const size_t n = p + 1 < B / 2 ? static_cast<size_t>(c[0] + c[1]) : (q + 1) * r.own - t;
      if (n > chunk) return {};
      const int g = q * B / 2 + p;
      if (out.empty() || out.back().n + n > chunk) out.push_back({g, g, t, 0});
      out.back().g1 = g + 1;
      out.back().n += static_cast<int>(n);
      t += n;
    }
  }
  return out;
}

// One pass over chunks of whole pairs: each chunk's logits, its rows' losses, its sequences'
// log-probabilities, its pairs' weights (and this rank's pairs' sums), then its gradient from
// the same logits.
void pairwise_pass(Passes& p, const HeadRows& rows, const PreferenceHead& h, CallBuffers& buf,
                   std::span<const PairChunk> chunks, int B) {
  const PairLayout pairs(p.be, rows, buf, B);
  float* row_weight = buf.take(rows.rows);
  for (const PairChunk& c : chunks) {
    p.logits_of(c.t0, c.n);
    p.row_stats(c.t0, c.n);
    rows.to_layout(p.be, pairs.losses, p.row_loss, c.t0, c.n);
    pairs.weigh(h, c.g0, c.g1);
    rows.from_layout(p.be, row_weight, pairs.weight, c.t0, c.n);
    p.input_grad(c.t0, c.n, row_weight);
  }
}

}  // namespace

void row_sequence_bounds(int B, int T, int32_t* bounds) {
  for (int b = 0; b < B; ++b) {
    bounds[2 * b] = b * T;
    bounds[2 * b + 1] = (b + 1) * T;
  }
}

int compact_target_rows(std::span<const int32_t> targets, int T, int32_t* index, int32_t* compact,
                        std::span<int> per_sequence) {
  const size_t N = targets.size();
  int n = 0;
  for (size_t i = 0; i < N; ++i) {
    if (i % T == 0) per_sequence[i / T] = 0;
    if (targets[i] == kIgnoreIndex) continue;
    ++per_sequence[i / T];
    index[n] = static_cast<int32_t>(i);
    compact[n++] = targets[i];
  }
  std::fill(index + n, index + N, static_cast<int32_t>(N - 1));
  std::fill(compact + n, compact + N, kIgnoreIndex);
  return n;
}

void preference_head_loss(const Backend& be, const ShardedTable& table, const PreferenceHead& h,
                          float* dx, const float* x, const int32_t* targets,
                          const TargetRows& target_rows, int B, int T, int C, int V) {
  KILN_CHECK(B % 2 == 0 && h.sums != nullptr, "preference head: {} rows are not pairs", B);
  KILN_CHECK(h.ref_seq != nullptr || h.terms.type == PreferenceLossType::kSimpo,
             "preference head: no reference log-probabilities");
  CallBuffers buf(table);
  const HeadRows rows =
      head_rows(be, table, buf, target_rows, x, targets, h.ref_seq, true, B, T, C);
  Passes p = make_passes(be, table, buf, rows, C, V);
  const std::vector<PairChunk> chunks =
      table.grad != nullptr ? pair_chunks(rows, B, p.chunk) : std::vector<PairChunk>{};
  if (!chunks.empty()) {
    pairwise_pass(p, rows, h, buf, chunks, B);
  } else {
    two_passes(p, rows, h, buf, table.grad == nullptr, B);
  }
  // This rank's rows' dx (the group's contributions summed), scattered into its batch.
  const float* own_dx = rows.dx;
  if (table.group != nullptr) {
    float* mine = buf.take(rows.own * C);
    Stream* after = &be.compute_stream();
    table.group
        ->reduce_scatter_async(mine, rows.dx, rows.own * C, DType::F32, ReduceOp::kSum, after)
        ->wait(*after);
    own_dx = mine;
  }
  be.fill_zero(dx, static_cast<size_t>(B) * T * C * sizeof(float));
  be.embedding_backward(dx, own_dx, rows.own_index, static_cast<int>(rows.own), C);
}

void head_sequence_logps(const Backend& be, const ShardedTable& table, double* seq, const float* x,
                         const int32_t* targets, const TargetRows& target_rows, int B, int T, int C,
                         int V) {
  CallBuffers buf(table);
  const HeadRows rows = head_rows(be, table, buf, target_rows, x, targets, nullptr, false, B, T, C);
  Passes p = make_passes(be, table, buf, rows, C, V);
  p.row_losses(false);
  // This rank's own sequences only.
  const size_t own = static_cast<size_t>(rows.rank) * B * T;
  be.sequence_logps(seq, p.layout_losses(buf) + own, rows.all_targets + own, target_rows.bounds, B);
}

}  // namespace kiln
