// The LoRA product (layer_product.h): a base product plus its adapters', PEFT's math on the
// base's products (lora_layout.h has the groups; lora_kind.h binds it to a layer). For a group
// with input x (n, in), base output y (n, out) and chosen targets t, each with A_t (r, in) and
// B_t (out_t, r) writing columns [out_begin_t, +out_t) of y:
//   forward:  u (n, R) = s * x [A_t; ...]^T (one product, R = targets * r), kept for backward;
//             y += u Bd^T, where Bd (out, R) is the B's block-diagonal: B_t at rows
//             [out_begin_t, +out_t), columns [i r, +r). The adapters' share of a fused base
//             product (q/k/v, gate/up) is then one product laid out as that product's output.
//   backward: from dy (n, out): du (n, R) = dy Bd, d(Bd) = dy^T u, so dB_t += s dy_t^T (x A_t^T)
//             (Bd's diagonal blocks); g = s du; dA (R, in) += g^T x; dx (n, in) += g A.
// Dropout (PEFT's lora_dropout, p > 0, training only): u's columns of target t are
// s * x_t A_t^T with x_t = dropout_t(x), and dA_t += g_t^T x_t, dx += dropout_t(g_t A_t). PEFT
// gives every target module its own nn.Dropout, so each target draws its own mask, here too: the
// group's one A product becomes one product per target (the same FLOPs, in r-wide pieces) and
// each target adds a mask pass over x in the forward and two in the backward (x_t redrawn, the
// gradient masked) besides an add; one mask per group would keep the fused product but make
// q, k and v (gate and up) see the same dropped x, which PEFT never does. A mask is a pure
// function of its seed (Backend::dropout), lora_dropout_seed(micro-batch seed, layer, target):
// the backward and a recomputed forward redraw it, nothing is stored.
// Only the Backend's products, copies, adds and dropout: every backend runs it as it is.
#pragma once

#include "kiln/kernels/ops.h"
#include "kiln/model/layer_product.h"
#include "kiln/model/lora_layout.h"

namespace kiln {

// Device scratch for the adapters' products, shared by every layer (M = max_out(),
// R = max_ranks(), I = max_in(), r the rank; n tokens):
struct LoraScratch {
  void* b_block = nullptr;    // (M, R), in the parameters' dtype: a group's Bd
  float* delta = nullptr;     // (n, M), with dropout (n, max(M, I)): u Bd^T before it is added
                              // to y; with dropout, in backward, a target's masked g_t A_t
  float* db_block = nullptr;  // (M, R), training: d(Bd)
  float* db = nullptr;        // (M, r), training: Bd's diagonal blocks, stacked as the B's are
  float* du = nullptr;        // (n, R), training
  void* dropped = nullptr;    // (n, I), with dropout, in the activation dtype: x_t
  float* part = nullptr;      // (n, r), with dropout: u_t in forward, g_t in backward
};

// Dropout on a layer's adapter inputs during one pass: p 0 (evaluation, generation, or
// lora.dropout 0) drops nothing.
struct LoraDropout {
  float p = 0.0f;
  uint64_t seed = 0;  // the micro-batch's (Decoder::set_dropout_seed)
  int64_t layer = 0;
};

// The seed of target t's mask in layer `layer` for a micro-batch's seed: one independent stream
// per (micro-batch, layer, target) (dropout_mask.h), the same in a recomputed forward.
uint64_t lora_dropout_seed(uint64_t micro_batch_seed, int64_t layer, LoraTarget t);
// A micro-batch's seed from the run's seed (train.seed), the optimizer step, the micro-step
// within it and the rank: what the trainer passes to Decoder::set_dropout_seed, so a step's
// masks repeat on resume and differ between steps, micro-steps and ranks.
uint64_t lora_micro_batch_seed(uint64_t run_seed, int64_t step, int64_t micro_step, int64_t rank);

// One layer's products during one pass: its base product's, each group's adapters added to them.
// `base` may be any product (the plain one, a quantised base).
class LoraProduct final : public LayerProduct {
 public:
  LoraProduct(const Backend& be, const LoraOffsets& o, float scale)
      : be_(be), o_(o), scale_(scale) {}
  // Binds a layer's pass: its base product, its adapter unit's parameters w (as acquired) and
  // gradient dw (null without backward), and its saved u's, (n, total_ranks()) floats, every
  // group's (n, R_g) block in group order.
  void bind(const LayerProduct& base, ConstDevPtr w, float* dw, float* u, const LoraScratch& sc,
            int n, LoraDropout dropout) {
    base_ = &base;
    w_ = w;
    dw_ = dw;
    u_ = u;
    sc_ = sc;
    n_ = n;
    dropout_ = dropout;
  }

  // The base's y, then y += s B A dropout(x) for the group's targets, keeping u.
  void forward(ProjectionGroup g, ConstDevPtr x, float* y) const override;
  // The base's dx (written) and gradients, then the adapters' share of dx (+=) and their dA, dB.
  void backward(ProjectionGroup g, ConstDevPtr x, const float* dy, float* dx) const override;

 private:
  // The adapters' forward of group g: u kept; y += u Bd^T unless y is null.
  void apply(ProjectionGroup g, ConstDevPtr x, float* y) const;
  // Their backward: dout (n, out) d(the group's output); dw_ +=; dx (n, in) +=.
  void adapters_backward(ProjectionGroup g, ConstDevPtr x, const float* dout, float* dx) const;
  float* u_of(ProjectionGroup group) const;
  // Bd for `g`: the stacked B itself when one target fills the output, else built in b_block.
  ConstDevPtr b_block(const LoraGroup& g) const;
  bool b_is_block(const LoraGroup& g) const { return g.ranks() == 1 && g.out_size[0] == g.out; }
  // Target i of g's dropped input x_i (n, in) into sc_.dropped.
  ConstDevPtr drop_input(const LoraGroup& g, int i, ConstDevPtr x) const;
  // u (n, R) = x_t A_t^T target by target (dropout), unscaled.
  void dropped_down_products(const LoraGroup& g, ConstDevPtr x, float* u) const;
  // dA_t += g_t^T x_t and dx += dropout_t(g_t A_t) for every target of g, from g = s du in sc_.du.
  void dropped_backward(const LoraGroup& g, ConstDevPtr x, float* dx) const;

  const Backend& be_;
  const LoraOffsets& o_;
  float scale_;
  const LayerProduct* base_ = nullptr;
  ConstDevPtr w_{static_cast<const float*>(nullptr)};
  float* dw_ = nullptr;
  float* u_ = nullptr;
  LoraScratch sc_;
  int n_ = 0;
  LoraDropout dropout_;
};

}  // namespace kiln
