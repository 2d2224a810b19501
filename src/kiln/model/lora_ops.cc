#include "kiln/model/lora_ops.h"

#include "kiln/kernels/dropout_mask.h"

namespace kiln {

uint64_t lora_dropout_seed(uint64_t micro_batch_seed, int64_t layer, LoraTarget t) {
  const uint64_t stream = static_cast<uint64_t>(layer) * kNumLoraTargets + static_cast<uint64_t>(t);
  return dropout_stream_seed(micro_batch_seed, stream);
}

uint64_t lora_micro_batch_seed(uint64_t run_seed, int64_t step, int64_t micro_step, int64_t rank) {
  constexpr uint64_t kDomain = 0x6c6f72612d64726full;  // "lora-dro": not init's streams
  uint64_t s = dropout_stream_seed(run_seed ^ kDomain, static_cast<uint64_t>(step));
  s = dropout_stream_seed(s, static_cast<uint64_t>(micro_step));
  return dropout_stream_seed(s, static_cast<uint64_t>(rank));
}

float* LoraProduct::u_of(ProjectionGroup group) const {
  int64_t before = 0;
  for (int i = 0; i < static_cast<int>(group); ++i) before += o_.groups[i].ranks() * o_.rank;
  return u_ + before * n_;
}

ConstDevPtr LoraProduct::b_block(const LoraGroup& g) const {
  if (b_is_block(g)) return w_.at(g.b);
  const size_t e = dtype_size(w_.dtype), r = o_.rank, R = g.ranks() * r;
  char* dst = static_cast<char*>(sc_.b_block);
  be_.fill_zero(dst, static_cast<size_t>(g.out) * R * e);
  int64_t row = 0;  // B_t's first row in the stacked B's
  for (int i = 0; i < g.ranks(); ++i) {
    // B_t (out_t, r) -> Bd rows [out_begin_t, +out_t), columns [i r, +r)
    be_.copy_2d(dst + (g.out_begin[i] * R + i * r) * e, R * e, w_.at(g.b + row * r).data, r * e,
                r * e, g.out_size[i]);
    row += g.out_size[i];
  }
  return {sc_.b_block, w_.dtype};
}

ConstDevPtr LoraProduct::drop_input(const LoraGroup& g, int i, ConstDevPtr x) const {
  const DevPtr xd{sc_.dropped, be_.activation_dtype()};
  const uint64_t seed = lora_dropout_seed(dropout_.seed, dropout_.layer, g.targets[i]);
  be_.dropout(xd, x, static_cast<size_t>(n_) * g.in, dropout_.p, seed, 0);
  return xd;
}

void LoraProduct::dropped_down_products(const LoraGroup& g, ConstDevPtr x, float* u) const {
  const int r = static_cast<int>(o_.rank), R = g.ranks() * r, in = static_cast<int>(g.in);
  const size_t f = sizeof(float);
  for (int i = 0; i < g.ranks(); ++i) {
    // u_i (n, r) = x_i A_i^T: u itself for a lone target, else columns [i r, +r) of u
    float* ui = g.ranks() == 1 ? u : sc_.part;
    be_.matmul_forward(ui, drop_input(g, i, x), w_.at(g.a + i * r * g.in), nullptr, n_, in, r);
    if (g.ranks() > 1) be_.copy_2d(u + i * r, R * f, ui, r * f, r * f, n_);
  }
}

void LoraProduct::forward(ProjectionGroup g, ConstDevPtr x, float* y) const {
  base_->forward(g, x, y);
  apply(g, x, y);
}

void LoraProduct::backward(ProjectionGroup g, ConstDevPtr x, const float* dy, float* dx) const {
  base_->backward(g, x, dy, dx);
  adapters_backward(g, x, dy, dx);
}

void LoraProduct::apply(ProjectionGroup group, ConstDevPtr x, float* y) const {
  const LoraGroup& g = o_.group(group);
  if (g.targets.empty()) return;
  const int R = static_cast<int>(g.ranks() * o_.rank), in = static_cast<int>(g.in);
  const int out = static_cast<int>(g.out);
  float* u = u_of(group);
  if (dropout_.p > 0) {
    dropped_down_products(g, x, u);
  } else {
    be_.matmul_forward(u, x, w_.at(g.a), nullptr, n_, in, R);  // (n, R)
  }
  be_.scale(u, scale_, static_cast<size_t>(n_) * R);
  if (y == nullptr) return;
  be_.matmul_forward(sc_.delta, u, b_block(g), nullptr, n_, R, out);
  be_.add(y, y, sc_.delta, static_cast<size_t>(n_) * out);
}

void LoraProduct::dropped_backward(const LoraGroup& g, ConstDevPtr x, float* dx) const {
  const int r = static_cast<int>(o_.rank), R = g.ranks() * r, in = static_cast<int>(g.in);
  const size_t f = sizeof(float), nin = static_cast<size_t>(n_) * in;
  for (int i = 0; i < g.ranks(); ++i) {
    // g_i (n, r): du itself for a lone target, else its columns [i r, +r)
    float* gi = g.ranks() == 1 ? sc_.du : sc_.part;
    if (g.ranks() > 1) be_.copy_2d(gi, r * f, sc_.du + i * r, R * f, r * f, n_);
    const uint64_t seed = lora_dropout_seed(dropout_.seed, dropout_.layer, g.targets[i]);
    // dA_i (r, in) += g_i^T x_i; delta (n, in) = g_i A_i, then through x_i's mask into dx
    be_.matmul_backward(sc_.delta, dw_ + g.a + i * r * g.in, nullptr, gi, drop_input(g, i, x),
                        w_.at(g.a + i * r * g.in), n_, in, r, false);
    be_.dropout(sc_.delta, sc_.delta, nin, dropout_.p, seed, 0);
    be_.add(dx, dx, sc_.delta, nin);
  }
}

void LoraProduct::adapters_backward(ProjectionGroup group, ConstDevPtr x, const float* dout,
                                    float* dx) const {
  const LoraGroup& g = o_.group(group);
  if (g.targets.empty()) return;
  const int r = static_cast<int>(o_.rank), R = g.ranks() * r, in = static_cast<int>(g.in);
  const int out = static_cast<int>(g.out);
  const float* u = u_of(group);
  const size_t f = sizeof(float);
  // du (n, R) = dout Bd; d(Bd) (out, R) += dout^T u
  if (b_is_block(g)) {
    be_.matmul_backward(sc_.du, dw_ + g.b, nullptr, dout, u, b_block(g), n_, R, out, false);
  } else {
    be_.fill_zero(sc_.db_block, static_cast<size_t>(out) * R * f);
    be_.matmul_backward(sc_.du, sc_.db_block, nullptr, dout, u, b_block(g), n_, R, out, false);
    int64_t row = 0;
    for (int i = 0; i < g.ranks(); ++i) {  // Bd's diagonal blocks, stacked as the B's
      be_.copy_2d(sc_.db + row * r, r * f, sc_.db_block + g.out_begin[i] * R + i * r, R * f, r * f,
                  g.out_size[i]);
      row += g.out_size[i];
    }
    be_.add(dw_ + g.b, dw_ + g.b, sc_.db, static_cast<size_t>(row) * r);
  }
  // g = s du; dA (R, in) += g^T x; dx (n, in) += g A
  be_.scale(sc_.du, scale_, static_cast<size_t>(n_) * R);
  if (dropout_.p > 0) {
    dropped_backward(g, x, dx);
  } else {
    be_.matmul_backward(dx, dw_ + g.a, nullptr, sc_.du, x, w_.at(g.a), n_, in, R, true);
  }
}

}  // namespace kiln
