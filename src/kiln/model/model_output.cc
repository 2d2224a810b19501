#include "kiln/model/model_output.h"

#include <vector>

#include "kiln/model/hf_checkpoint.h"
#include "kiln/model/lora_units.h"
#include "kiln/model/peft_adapter.h"

namespace kiln {

void save_model_output(const fs::path& out, const ModelConfig& config, const HfModelFiles& files,
                       const ParamLayout& layout,
                       const std::function<void(int unit, float* out)>& read_unit, DType dtype,
                       const std::string& base_name) {
  if (!layout.has_lora()) {
    save_hf_model_dir(out, files, layout, read_unit, dtype);
    return;
  }
  LoraTensors tensors(config, layout.lora());
  std::vector<float> unit;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const int u = layout.lora_unit(static_cast<int>(l));
    unit.resize(layout.units()[u].numel);
    read_unit(u, unit.data());
    lora_tensors_from_unit(layout, unit.data(), l, tensors);
  }
  write_peft_adapter(out, layout.lora(), base_name, tensors, dtype, files);
}

bool has_model_output(const fs::path& dir, const ParamLayout& layout) {
  if (layout.has_lora()) return fs::exists(dir / kPeftWeightsFile);
  return fs::exists(dir / "model.safetensors") || fs::exists(dir / "model.safetensors.index.json");
}

size_t model_output_host_floats(const ParamLayout& layout) {
  // The adapters as LoraTensors, plus the unit being read.
  if (layout.has_lora()) return layout.trainable_numel() + layout.units().back().numel;
  return hf_save_buffer_floats(layout);
}

}  // namespace kiln
