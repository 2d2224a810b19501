// The plain product: each projection group (layer_product.h) is one matrix product with the
// layer unit's weights, fused as the layout lays them out (layout.h); (in) -> (out), weight:
//   kQkv:    (n, C) -> (n, Q + 2 KV), [Wq; Wk; Wv] (Q + 2 KV, C) and, with attention_bias,
//            [bq; bk; bv] (Q + 2 KV)
//   kO:      (n, Q) -> (n, C), Wo (C, Q)
//   kGateUp: (n, C) -> (n, 2I), [Wg; Wu] (2I, C)
//   kDown:   (n, I) -> (n, C), Wd (C, I)
// forward y = x W^T (+ b); backward dx = dy W (written) and, when the layer unit trains,
// dW += dy^T x, db += column sums of dy.
#pragma once

#include <array>

#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"
#include "kiln/model/layer_product.h"
#include "kiln/model/layout.h"
#include "kiln/model/product_kind.h"

namespace kiln {

class PlainProduct final : public LayerProduct {
 public:
  PlainProduct(const Backend& be, const ModelConfig& c, const LayerOffsets& o);
  // The layer unit's parameters w and gradient dw (null: frozen, or no backward), n tokens.
  void bind(ConstDevPtr w, float* dw, int n) {
    w_ = w;
    dw_ = dw;
    n_ = n;
  }
  void forward(ProjectionGroup g, ConstDevPtr x, float* y) const override;
  void backward(ProjectionGroup g, ConstDevPtr x, const float* dy, float* dx) const override;

 private:
  // A group's weight (out, in) and bias (out) in the layer unit (the bias kNoTensor without).
  struct Group {
    size_t weight, bias;
    int in, out;
  };
  const Backend& be_;
  std::array<Group, kNumProjectionGroups> groups_;
  ConstDevPtr w_{static_cast<const float*>(nullptr)};
  float* dw_ = nullptr;
  int n_ = 0;
};

// The plain kind: no units of its own, no buffers.
class PlainKind final : public ProductKind {
 public:
  PlainKind(const Backend& be, const ModelConfig& c, const LayerOffsets& o) : product_(be, c, o) {}
  std::span<const int> own_units(int) const override { return {}; }
  void plan(DeviceArena&, size_t, bool, bool) override {}
  const LayerProduct& bind(int, const LayerParams& p, const ProductPass& pass) override {
    product_.bind(p.w[0], p.dw[0], pass.n);
    return product_;
  }

 private:
  PlainProduct product_;
};

}  // namespace kiln
