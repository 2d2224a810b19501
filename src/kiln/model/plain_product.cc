#include "kiln/model/plain_product.h"

#include "kiln/model/decoder_layer.h"

namespace kiln {

PlainProduct::PlainProduct(const Backend& be, const ModelConfig& c, const LayerOffsets& o)
    : be_(be) {
  const int C = static_cast<int>(c.hidden_size), I = static_cast<int>(c.intermediate_size);
  const int Q = static_cast<int>(c.q_dim()), KV = static_cast<int>(c.kv_dim());
  constexpr size_t kNone = LayerOffsets::kNoTensor;
  groups_[static_cast<int>(ProjectionGroup::kQkv)] = {o.wq, o.bq, C, Q + 2 * KV};
  groups_[static_cast<int>(ProjectionGroup::kO)] = {o.wo, kNone, Q, C};
  groups_[static_cast<int>(ProjectionGroup::kGateUp)] = {o.wg, kNone, C, 2 * I};
  groups_[static_cast<int>(ProjectionGroup::kDown)] = {o.wd, kNone, I, C};
}

void PlainProduct::forward(ProjectionGroup g, ConstDevPtr x, float* y) const {
  if (y == nullptr) return;  // nothing of the plain product is kept for backward
  const Group& s = groups_[static_cast<int>(g)];
  be_.matmul_forward(y, x, w_.at(s.weight), layer_tensor(w_, s.bias), n_, s.in, s.out);
}

void PlainProduct::backward(ProjectionGroup g, ConstDevPtr x, const float* dy, float* dx) const {
  const Group& s = groups_[static_cast<int>(g)];
  be_.matmul_backward(dx, layer_grad(dw_, s.weight), layer_grad(dw_, s.bias), dy, x,
                      w_.at(s.weight), n_, s.in, s.out, false);
}

}  // namespace kiln
