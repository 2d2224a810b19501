#include "kiln/model_files/adapted_model.h"

#include <vector>

#include "kiln/base/error.h"
#include "kiln/model_files/lora_units.h"

namespace kiln {

std::optional<LoraConfig> AdaptedModel::lora() const {
  if (!adapter) return std::nullopt;
  return adapter->config.lora;
}

std::optional<LoraConfig> AdaptedModel::inference_lora() const {
  std::optional<LoraConfig> l = lora();
  if (l) l->dropout = 0.0;
  return l;
}

AdaptedModel read_adapted_model(const fs::path& model, const fs::path& adapter_dir) {
  AdaptedModel m;
  m.config = read_config(model / "config.json");
  if (!adapter_dir.empty()) m.adapter = read_peft_adapter(adapter_dir, m.config);
  return m;
}

UnitReader adapted_unit_reader(const AdaptedModel& m, const ParamLayout& layout,
                               UnitReader read_base) {
  KILN_CHECK(layout.has_lora() == m.adapter.has_value(),
             "the layout {} LoRA units, the model {} an adapter",
             layout.has_lora() ? "has" : "has no", m.adapter ? "has" : "has no");
  const int first_adapter = layout.has_lora() ? layout.lora_unit(0) : layout.num_units();
  return [&m, &layout, first_adapter, read_base = std::move(read_base)](int u, float* out) {
    if (u < first_adapter) return read_base(u, out);
    lora_unit_from_tensors(layout, m.adapter->tensors, u - first_adapter, out);
  };
}

void load_units(const ParamLayout& layout, const UnitReader& read_unit, ParamStore& store) {
  std::vector<float> host;
  for (int u = 0; u < layout.num_units(); ++u) {
    host.assign(layout.units()[u].numel, 0.0f);
    read_unit(u, host.data());
    store.load_unit(u, host.data());
  }
}

}  // namespace kiln
