// The units a decoder layer reads in one pass, and the bracket a model puts around them: acquired
// in order (the layer's own unit, then its product's own units: ProductKind::own_units),
// released in reverse. In a pass with gradients each trainable unit's gradient is taken once all
// are acquired and marked done right after the unit's release; a frozen unit (not
// ParamUnit::trainable) is only acquired and released, and its dw is null.
#pragma once

#include <vector>

#include "kiln/model/layout.h"
#include "kiln/model/product_kind.h"
#include "kiln/model/unit_access.h"

namespace kiln {

class LayerUnits {
 public:
  LayerUnits(const ParamLayout& layout, const ProductKind& kind, int layers);

  // Layer l's units acquired, with each trainable one's gradient when `grads`; valid until the
  // next acquire.
  LayerParams acquire(int l, UnitAccess& params, bool grads);
  // The same units released in reverse order, each trainable one's gradient done when `grads`.
  void release(int l, UnitAccess& params, bool grads);

 private:
  struct Unit {
    int id;
    bool trainable;
  };
  std::vector<std::vector<Unit>> units_;  // per layer, in acquire order
  std::vector<ConstDevPtr> w_;            // the acquired layer's, one per unit
  std::vector<float*> dw_;
};

}  // namespace kiln
