#include "kiln/model_files/model_output.h"

#include <vector>

#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/model_files/lora_export.h"
#include "kiln/model_files/peft_adapter.h"

namespace kiln {

void save_model_output(const fs::path& out, const ModelConfig& config, const HfModelFiles& files,
                       const ParamLayout& layout,
                       const std::function<void(int unit, float* out)>& read_unit, DType dtype,
                       const std::string& base_name, const std::optional<FileDigest>& base) {
  if (!layout.has_lora()) {
    save_hf_model_dir(out, files, layout, read_unit, dtype);
    return;
  }
  export_lora_adapter(out, config, layout, read_unit, base_name, files, dtype, base);
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
