#include "kiln/model/lora_ops.h"

namespace kiln {

float* LoraLayerPass::u_of(LoraGroupId group) const {
  int64_t before = 0;
  for (int i = 0; i < static_cast<int>(group); ++i) before += o_.groups[i].ranks() * o_.rank;
  return u_ + before * n_;
}

ConstDevPtr LoraLayerPass::b_block(const LoraGroup& g) const {
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

void LoraLayerPass::apply(LoraGroupId group, ConstDevPtr x, float* y) const {
  const LoraGroup& g = o_.group(group);
  if (g.targets.empty()) return;
  const int R = static_cast<int>(g.ranks() * o_.rank), in = static_cast<int>(g.in);
  const int out = static_cast<int>(g.out);
  float* u = u_of(group);
  be_.matmul_forward(u, x, w_.at(g.a), nullptr, n_, in, R);  // (n, R)
  be_.scale(u, scale_, static_cast<size_t>(n_) * R);
  if (y == nullptr) return;
  be_.matmul_forward(sc_.delta, u, b_block(g), nullptr, n_, R, out);
  be_.add(y, y, sc_.delta, static_cast<size_t>(n_) * out);
}

void LoraLayerPass::backward(LoraGroupId group, float* dw, ConstDevPtr x, const float* dout,
                             float* dx) const {
  const LoraGroup& g = o_.group(group);
  if (g.targets.empty()) return;
  const int r = static_cast<int>(o_.rank), R = g.ranks() * r, in = static_cast<int>(g.in);
  const int out = static_cast<int>(g.out);
  const float* u = u_of(group);
  const size_t f = sizeof(float);
  // du (n, R) = dout Bd; d(Bd) (out, R) += dout^T u
  if (b_is_block(g)) {
    be_.matmul_backward(sc_.du, dw + g.b, nullptr, dout, u, b_block(g), n_, R, out, false);
  } else {
    be_.fill_zero(sc_.db_block, static_cast<size_t>(out) * R * f);
    be_.matmul_backward(sc_.du, sc_.db_block, nullptr, dout, u, b_block(g), n_, R, out, false);
    int64_t row = 0;
    for (int i = 0; i < g.ranks(); ++i) {  // Bd's diagonal blocks, stacked as the B's
      be_.copy_2d(sc_.db + row * r, r * f, sc_.db_block + g.out_begin[i] * R + i * r, R * f, r * f,
                  g.out_size[i]);
      row += g.out_size[i];
    }
    be_.add(dw + g.b, dw + g.b, sc_.db, static_cast<size_t>(row) * r);
  }
  // g = s du; dA (R, in) += g^T x; dx (n, in) += g A
  be_.scale(sc_.du, scale_, static_cast<size_t>(n_) * R);
  be_.matmul_backward(dx, dw + g.a, nullptr, sc_.du, x, w_.at(g.a), n_, in, R, true);
}

}  // namespace kiln
