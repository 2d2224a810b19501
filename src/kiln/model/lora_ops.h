// The adapters' products for one decoder layer, PEFT's math on the base's products (lora_layout.h
// has the groups). For a group with input x (n, in), base output y (n, out) and chosen targets
// t, each with A_t (r, in) and B_t (out_t, r) writing columns [out_begin_t, +out_t) of y:
//   forward:  u (n, R) = s * x [A_t; ...]^T (one product, R = targets * r), kept for backward;
//             y += u Bd^T, where Bd (out, R) is the B's block-diagonal: B_t at rows
//             [out_begin_t, +out_t), columns [i r, +r). The adapters' share of a fused base
//             product (q/k/v, gate/up) is then one product laid out as that product's output.
//   backward: from dy (n, out): du (n, R) = dy Bd, d(Bd) = dy^T u, so dB_t += s dy_t^T (x A_t^T)
//             (Bd's diagonal blocks); g = s du; dA (R, in) += g^T x; dx (n, in) += g A.
// Only the Backend's products, copies and adds: every backend runs it as it is. Dropout is not
// implemented (the Decoder refuses lora.dropout > 0).
#pragma once

#include "kiln/kernels/ops.h"
#include "kiln/model/decoder_layer.h"
#include "kiln/model/lora_layout.h"

namespace kiln {

// Device scratch for the adapters' products, shared by every layer (M = max_out(),
// R = max_ranks(), r the rank; n tokens):
struct LoraScratch {
  void* b_block = nullptr;    // (M, R), in the parameters' dtype: a group's Bd
  float* delta = nullptr;     // (n, M): u Bd^T before it is added to y
  float* db_block = nullptr;  // (M, R), training: d(Bd)
  float* db = nullptr;        // (M, r), training: Bd's diagonal blocks, stacked as the B's are
  float* du = nullptr;        // (n, R), training
};

// One layer's adapters during one pass: its unit's parameters w (as acquired) and its saved u's,
// (n, total_ranks()) floats, every group's (n, R_g) block in group order.
class LoraLayerPass final : public LayerAdapters {
 public:
  LoraLayerPass(const Backend& be, const LoraOffsets& o, float scale, ConstDevPtr w, float* u,
                const LoraScratch& sc, int n)
      : be_(be), o_(o), scale_(scale), w_(w), u_(u), sc_(sc), n_(n) {}

  void apply(LoraGroupId group, ConstDevPtr x, float* y) const override;
  // dout (n, out): d(the group's base output). dw: the unit's gradient (+=); dx (n, in) +=.
  void backward(LoraGroupId group, float* dw, ConstDevPtr x, const float* dout, float* dx) const;

 private:
  float* u_of(LoraGroupId group) const;
  // Bd for `g`: the stacked B itself when one target fills the output, else built in b_block.
  ConstDevPtr b_block(const LoraGroup& g) const;
  bool b_is_block(const LoraGroup& g) const { return g.ranks() == 1 && g.out_size[0] == g.out; }

  const Backend& be_;
  const LoraOffsets& o_;
  float scale_;
  ConstDevPtr w_;
  float* u_;
  LoraScratch sc_;
  int n_;
};

}  // namespace kiln
