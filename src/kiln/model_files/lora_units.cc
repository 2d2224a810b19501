#include "kiln/model_files/lora_units.h"

#include <algorithm>

#include "kiln/base/error.h"

namespace kiln {

namespace {

// Calls f(entry, factors' vector) for each A and B of layer `layer`.
template <class Tensors, class F>
void for_each_factor(const ParamLayout& layout, Tensors& tensors, int64_t layer, F&& f) {
  KILN_CHECK(layout.has_lora(), "the layout has no adapters");
  const LoraConfig& lora = layout.lora();
  KILN_CHECK(tensors.rank() == lora.rank && tensors.targets() == lora.targets,
             "the adapter tensors were shaped for another LoRA configuration");
  const ParamUnit& unit = layout.units()[layout.lora_unit(static_cast<int>(layer))];
  for (LoraTarget t : lora.targets) {
    auto& factors = tensors.at(layer, t);
    f(unit.entry(peft_tensor_name(layer, t, LoraFactor::kA)), factors.a);
    f(unit.entry(peft_tensor_name(layer, t, LoraFactor::kB)), factors.b);
  }
}

}  // namespace

void lora_unit_from_tensors(const ParamLayout& layout, const LoraTensors& tensors, int64_t layer,
                            float* unit) {
  for_each_factor(layout, tensors, layer, [&](const ParamEntry& e, const std::vector<float>& v) {
    KILN_CHECK(v.size() == e.numel, "{}: {} values, the unit has {}", e.name, v.size(), e.numel);
    std::copy(v.begin(), v.end(), unit + e.offset);
  });
}

void lora_tensors_from_unit(const ParamLayout& layout, const float* unit, int64_t layer,
                            LoraTensors& tensors) {
  for_each_factor(layout, tensors, layer, [&](const ParamEntry& e, std::vector<float>& v) {
    v.assign(unit + e.offset, unit + e.offset + e.numel);
  });
}

}  // namespace kiln
