#include "kiln/model/layer_units.h"

#include <algorithm>

namespace kiln {

LayerUnits::LayerUnits(const ParamLayout& layout, const ProductKind& kind, int layers) {
  size_t most = 0;
  for (int l = 0; l < layers; ++l) {
    std::vector<Unit>& units = units_.emplace_back();
    const auto add = [&](int u) { units.push_back({u, layout.units()[u].trainable}); };
    add(layout.layer_unit(l));
    for (int u : kind.own_units(l)) add(u);
    most = std::max(most, units.size());
  }
  w_.assign(most, ConstDevPtr{static_cast<const float*>(nullptr)});
  dw_.assign(most, nullptr);
}

LayerParams LayerUnits::acquire(int l, UnitAccess& params, bool grads) {
  const std::vector<Unit>& units = units_[l];
  for (size_t i = 0; i < units.size(); ++i) w_[i] = params.acquire(units[i].id);
  for (size_t i = 0; i < units.size(); ++i) {
    dw_[i] = grads && units[i].trainable ? params.grad(units[i].id) : nullptr;
  }
  return {std::span(w_).first(units.size()), std::span(dw_).first(units.size())};
}

void LayerUnits::release(int l, UnitAccess& params, bool grads) {
  const std::vector<Unit>& units = units_[l];
  for (size_t i = units.size(); i-- > 0;) {
    params.release(units[i].id);
    if (grads && units[i].trainable) params.grad_done(units[i].id);
  }
}

}  // namespace kiln
