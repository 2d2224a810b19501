#include "kiln/model/lora_kind.h"

#include <algorithm>

namespace kiln {

LoraKind::LoraKind(const ModelConfig& c, const ParamLayout& layout, const Backend& be,
                   std::unique_ptr<ProductKind> base)
    : be_(be),
      base_(std::move(base)),
      offsets_(layout.lora_offsets()),
      dropout_(static_cast<float>(layout.lora().dropout)),
      product_(be, offsets_, static_cast<float>(layout.lora().scale())) {
  const int L = static_cast<int>(c.num_hidden_layers);
  for (int l = 0; l < L; ++l) {
    const std::span<const int> own = base_->own_units(l);
    units_.emplace_back(own.begin(), own.end());
    units_.back().push_back(layout.lora_unit(l));
  }
}

// M = max_out(), R = max_ranks(), I = max_in(), r the rank (lora_ops.h's LoraScratch).
void LoraKind::plan(DeviceArena& arena, size_t n, bool per_layer, bool training) {
  base_->plan(arena, n, per_layer, training);
  const LoraOffsets& o = offsets_;
  const size_t M = o.max_out(), R = o.max_ranks();
  per_layer_ = per_layer;
  u_.assign(units_.size(), nullptr);
  for (size_t l = 0; l < (per_layer ? u_.size() : 1); ++l) arena.add(&u_[l], n * o.total_ranks());
  LoraScratch& sc = scratch_;
  sc = {};
  const size_t g = training ? 1 : 0;
  // Dropout (training only): a target's dropped input, its u or gradient columns, and delta
  // wide enough for its masked input gradient.
  const size_t d = training && dropout_ > 0 ? 1 : 0, I = o.max_in();
  arena.add(&sc.b_block, M * R, be_.activation_dtype());  // the parameters' dtype
  arena.add(&sc.delta, n * std::max(M, d * I));
  arena.add(&sc.db_block, g * M * R);
  arena.add(&sc.db, g * M * o.rank);
  arena.add(&sc.du, g * n * R);
  arena.add(&sc.dropped, d * n * I, be_.activation_dtype());
  arena.add(&sc.part, d * n * o.rank);
}

const LayerProduct& LoraKind::bind(int l, const LayerParams& p, const ProductPass& pass) {
  const size_t a = p.w.size() - 1;  // the adapter unit, after the layer's and the base's own
  const LayerProduct& base = base_->bind(l, {p.w.first(a), p.dw.first(a)}, pass);
  if (pass.base_only) return base;
  const LoraDropout dropout{pass.training ? dropout_ : 0.0f, pass.dropout_seed, l};
  product_.bind(base, p.w[a], p.dw[a], u_[per_layer_ ? l : 0], scratch_, pass.n, dropout);
  return product_;
}

}  // namespace kiln
