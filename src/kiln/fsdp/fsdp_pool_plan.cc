#include "kiln/fsdp/fsdp_pool_plan.h"

#include <algorithm>
#include <deque>
#include <map>
#include <vector>

#include "kiln/kernels/device/device_buffer.h"

namespace kiln {

namespace {

enum class Kind { kGathered, kGrads, kComm };

// The pool's books: per size (floats), buffers alive now and the most alive at once, in all and
// per kind. A size's bytes go to the kinds in order (gathered, gradients, reduced shards), each
// up to its own most, so the parts add up to what the pool holds.
class PoolBooks {
 public:
  void take(size_t n, Kind k) {
    Count& c = counts_[n];
    c.most = std::max(c.most, ++c.live);
    const auto i = static_cast<size_t>(k);
    c.kind_most[i] = std::max(c.kind_most[i], ++c.kind_live[i]);
  }
  void give(size_t n, Kind k) {
    Count& c = counts_[n];
    --c.live;
    --c.kind_live[static_cast<size_t>(k)];
  }
  FsdpPoolPlan plan() const {
    FsdpPoolPlan p;
    size_t* parts[3] = {&p.gathered, &p.grads, &p.comm};
    for (const auto& [n, c] : counts_) {
      size_t left = c.most;
      for (size_t k = 0; k < 3; ++k) {
        const size_t mine = std::min(left, c.kind_most[k]);
        *parts[k] += mine * n * sizeof(float);
        left -= mine;
      }
    }
    return p;
  }

 private:
  struct Count {
    size_t live = 0, most = 0;
    size_t kind_live[3] = {0, 0, 0}, kind_most[3] = {0, 0, 0};
  };
  std::map<size_t, Count> counts_;
};

// Fsdp's state machine over sizes only: the same decisions as fsdp.cc in the same order.
class Replay {
 public:
  explicit Replay(const FsdpPoolSettings& s) : s_(s), units_(s.unit_numel.size()) {
    for (size_t u = 0; u < units_.size(); ++u) {
      const size_t S = s.shard_size;
      units_[u].padded = (s.unit_numel[u] + S - 1) / S * S;
      units_[u].shard = units_[u].padded / S;
    }
  }
  void acquire(int u) {
    if (!known_) order_.push_back(u);
    if (known_ && pos_ < order_.size()) ++pos_;
    ++units_[u].in_use;
    if (!gathers()) return;
    gather(u);
    if (s_.prefetch && known_ && pos_ < order_.size()) gather(order_[pos_]);
    if (s_.strategy == ShardStrategy::kShardGradOp) units_[u].keep = true;
  }
  void release(int u) {
    if (--units_[u].in_use == 0 && !units_[u].keep) free_full(u);
  }
  // Fsdp::embed_rows: every rank's ids and rows (S * N, C) while the lookup runs, or the table.
  void embed_rows(int u) {
    if (!rows_path(u, false)) {
      acquire(u);
      release(u);
      return;
    }
    rows_buffers();
  }
  // Fsdp::embed_rows_backward: the same buffers, or a whole-unit gradient.
  void embed_rows_backward(int u) {
    const bool rows = rows_path(u, true);
    units_[u].reduced = false;
    if (!rows) {
      grad(u);
      grad_done(u);
      return;
    }
    drain(0);
    rows_buffers();
  }
  // Fsdp::head_cross_entropy: the split vocabulary's buffers, or the table and its gradient.
  void head_cross_entropy(int u) {
    if (!vocab_path(u)) {
      acquire(u);
      grad(u);
      release(u);
      grad_done(u);
      return;
    }
    const size_t S = s_.shard_size, Nt = S * s_.tokens, C = s_.hidden, P = units_[u].shard;
    const size_t rows = vocab_head_logit_rows(Nt, P, C);
    std::vector<size_t> sizes = {Nt * C, Nt};
    if (bf16(s_.gather)) sizes.push_back(storage_floats(P, DType::BF16));
    sizes.insert(sizes.end(), {storage_floats(2 * C, s_.gather), 2 * C, Nt * C, rows * (P / C),
                               vocab_head_scratch_floats(rows, S)});
    for (size_t n : sizes) books_.take(n, Kind::kComm);
    for (size_t n : sizes) books_.give(n, Kind::kComm);
  }
  void grad(int u) {
    if (no_shard() || units_[u].grad) return;
    books_.take(units_[u].padded, Kind::kGrads);
    units_[u].grad = true;
  }
  void grad_done(int u) {
    Unit& x = units_[u];
    x.reduced = true;
    Pending p{u, 0, 0};
    if (no_shard() && bf16(s_.reduce)) {
      p.out = storage_floats(x.shard, DType::BF16);
      books_.take(p.out, Kind::kComm);
    } else if (!no_shard()) {
      p.grad = x.padded;
      if (bf16(s_.reduce)) {
        p.grad = storage_floats(x.padded, DType::BF16);
        books_.take(p.grad, Kind::kGrads);
        books_.give(x.padded, Kind::kGrads);
      }
      x.grad = false;
      p.out = storage_floats(x.shard, s_.reduce);
      books_.take(p.out, Kind::kComm);
    }
    pending_.push_back(p);
    drain(2);
  }
  void finish_backward() {
    drain(0);
    for (auto& x : units_) x.reduced = false;
    known_ = known_ || !order_.empty();
    pos_ = 0;
    for (size_t u = 0; u < units_.size(); ++u) {
      units_[u].keep = false;
      if (units_[u].in_use == 0) free_full(static_cast<int>(u));
    }
  }
  FsdpPoolPlan plan() const { return books_.plan(); }

 private:
  struct Unit {
    size_t padded = 0, shard = 0;
    bool full = false, keep = false, grad = false, reduced = false;
    int in_use = 0;
  };
  struct Pending {
    int unit;
    size_t grad, out;  // floats of the pooled buffers it holds (0: none)
  };
  static bool bf16(DType t) { return t == DType::BF16; }
  // Fsdp::rows_path.
  bool rows_path(int u, bool backward) const {
    return looks_up_by_rows(s_.strategy, s_.group_size, s_.unit_numel[u], s_.tokens, s_.hidden,
                            backward, units_[u].reduced);
  }
  // Fsdp::vocab_path.
  bool vocab_path(int u) const {
    return splits_vocabulary(s_.strategy, s_.shard_size, units_[u].shard, s_.unit_numel[u],
                             s_.tokens, s_.hidden);
  }
  void rows_buffers() {
    const size_t S = s_.group_size, N = s_.tokens;
    books_.take(S * N, Kind::kComm);
    books_.take(S * N * s_.hidden, Kind::kComm);
    books_.give(S * N, Kind::kComm);
    books_.give(S * N * s_.hidden, Kind::kComm);
  }
  bool no_shard() const { return s_.strategy == ShardStrategy::kNoShard; }
  bool gathers() const { return !no_shard() || s_.gather != DType::F32; }
  void gather(int u) {
    if (units_[u].full || !gathers()) return;
    books_.take(storage_floats(units_[u].padded, s_.gather), Kind::kGathered);
    units_[u].full = true;
  }
  void free_full(int u) {
    if (!units_[u].full) return;
    books_.give(storage_floats(units_[u].padded, s_.gather), Kind::kGathered);
    units_[u].full = false;
  }
  void drain(size_t keep_at_most) {
    while (pending_.size() > keep_at_most) {
      const Pending p = pending_.front();
      pending_.pop_front();
      if (p.out == 0) continue;
      if (!no_shard() && bf16(s_.reduce)) {  // the widened shard, added into the gradient
        books_.take(units_[p.unit].shard, Kind::kComm);
        books_.give(units_[p.unit].shard, Kind::kComm);
      }
      if (p.grad > 0) books_.give(p.grad, Kind::kGrads);
      books_.give(p.out, Kind::kComm);
    }
  }

  const FsdpPoolSettings& s_;
  std::vector<Unit> units_;
  std::vector<int> order_;
  bool known_ = false;
  size_t pos_ = 0;
  std::deque<Pending> pending_;
  PoolBooks books_;
};

// One micro-batch of Decoder::forward_backward, as it calls its UnitAccess.
void forward_backward(Replay& r, int layers, bool tied) {
  const int embed = 0, head = layers + 1, table = tied ? embed : layers + 2;
  r.embed_rows(embed);
  for (int l = 0; l < layers; ++l) {
    r.acquire(1 + l);
    r.release(1 + l);
  }
  r.acquire(head);
  r.grad(head);
  r.head_cross_entropy(table);
  r.release(head);
  r.grad_done(head);
  for (int l = layers - 1; l >= 0; --l) {
    r.acquire(1 + l);
    r.grad(1 + l);
    r.release(1 + l);
    r.grad_done(1 + l);
  }
  r.embed_rows_backward(embed);
  r.finish_backward();
}

}  // namespace

FsdpPoolPlan plan_fsdp_pool(const FsdpPoolSettings& s) {
  Replay r(s);
  const int layers = static_cast<int>(s.unit_numel.size()) - (s.tied ? 2 : 3);
  for (int step = 0; step < 2; ++step) forward_backward(r, layers, s.tied);
  return r.plan();
}

}  // namespace kiln
