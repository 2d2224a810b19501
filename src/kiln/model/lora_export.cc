#include "kiln/model/lora_export.h"

#include <memory>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/lora_merge.h"
#include "kiln/model/lora_units.h"
#include "kiln/model/peft_adapter.h"

namespace kiln {

void export_lora_adapter(const fs::path& out, const ModelConfig& config, const ParamLayout& layout,
                         const UnitReader& read_unit, const std::string& base_name,
                         const HfModelFiles& files, DType dtype) {
  KILN_CHECK(layout.has_lora(), "export_lora_adapter: the layout has no adapters");
  LoraTensors tensors(config, layout.lora());
  std::vector<float> unit;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const int u = layout.lora_unit(static_cast<int>(l));
    unit.assign(layout.units()[u].numel, 0.0f);
    read_unit(u, unit.data());
    lora_tensors_from_unit(layout, unit.data(), l, tensors);
  }
  write_peft_adapter(out, layout.lora(), base_name, tensors, dtype, files);
}

void export_lora_merged(const fs::path& out, const ModelConfig& config, const ParamLayout& layout,
                        const UnitReader& read_unit, const HfModelFiles& files, DType dtype,
                        uint64_t max_shard_bytes) {
  KILN_CHECK(layout.has_lora(), "export_lora_merged: the layout has no adapters");
  const ParamLayout base(config);  // the base's units, numbered as in `layout`
  // The units are host memory, so the merge's products run on the CPU backend.
  const std::unique_ptr<Backend> cpu = make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
  std::vector<float> adapter(layout.units()[layout.lora_unit(0)].numel);
  const int first_layer = base.layer_unit(0);
  const int layers = static_cast<int>(config.num_hidden_layers);
  save_hf_model_dir(
      out, files, base,
      [&](int u, float* w) {
        read_unit(u, w);
        const int l = u - first_layer;
        if (l < 0 || l >= layers) return;  // embedding, final norm, LM head: no adapters
        read_unit(layout.lora_unit(l), adapter.data());
        merge_lora(*cpu, layout, w, adapter.data());
      },
      dtype, max_shard_bytes);
}

}  // namespace kiln
