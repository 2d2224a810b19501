#include "kiln/model_files/lora_export.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model_files/lora_merge.h"
#include "kiln/model_files/lora_units.h"
#include "kiln/model_files/peft_adapter.h"

namespace kiln {

namespace {
// Every target weight of layer `l`'s merged unit `w` is finite (the base's own may not be).
void check_merged_finite(const ModelConfig& config, const ParamLayout& layout, const float* w,
                         int l) {
  for (LoraTarget t : layout.lora().targets) {
    const LoraShape s = lora_shape(config, t);
    const float* x = w + lora_target_offset(layout, t);
    const float* end = x + s.out * s.in;
    const float* bad = std::find_if(x, end, [](float e) { return !std::isfinite(e); });
    if (bad != end)
      fail(
          "merged weight model.layers.{}.{}.weight holds {} at element {} (W + s B A is not "
          "finite)",
          l, lora_module_path(t), *bad, bad - x);
  }
}
}  // namespace

namespace {
// Every adapter unit of `layout` as LoraTensors, each layer checked finite (a NaN is refused
// before anything is written). Adapters are small: r (in + out) per target and layer.
LoraTensors read_lora_tensors(const ModelConfig& config, const ParamLayout& layout,
                              const UnitReader& read_unit) {
  LoraTensors tensors(config, layout.lora());
  std::vector<float> unit;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const int u = layout.lora_unit(static_cast<int>(l));
    unit.assign(layout.units()[u].numel, 0.0f);
    read_unit(u, unit.data());
    lora_tensors_from_unit(layout, unit.data(), l, tensors);
    check_lora_finite(tensors, l, "adapter");
  }
  return tensors;
}
}  // namespace

void export_lora_adapter(const fs::path& out, const ModelConfig& config, const ParamLayout& layout,
                         const UnitReader& read_unit, const std::string& base_name,
                         const HfModelFiles& files, DType dtype,
                         const std::optional<FileDigest>& base) {
  KILN_CHECK(layout.has_lora(), "export_lora_adapter: the layout has no adapters");
  write_peft_adapter(out, layout.lora(), base_name, read_lora_tensors(config, layout, read_unit),
                     dtype, files, base);
}

void export_lora_merged(const fs::path& out, const ModelConfig& config, const ParamLayout& layout,
                        const UnitReader& read_unit, const HfModelFiles& files, DType dtype,
                        uint64_t max_shard_bytes) {
  KILN_CHECK(layout.has_lora(), "export_lora_merged: the layout has no adapters");
  read_lora_tensors(config, layout, read_unit);  // every adapter finite before the first write
  const ParamLayout base(config);                // the base's units, numbered as in `layout`
  // The units are host memory, so the merge's products run on the CPU backend.
  const std::unique_ptr<Backend> cpu = make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
  std::vector<float> adapter(layout.units()[layout.lora_unit(0)].numel);
  const int first_layer = base.layer_unit(0);
  const int layers = static_cast<int>(config.num_hidden_layers);
  // A merged weight is known finite only once merged, after earlier files are written; the
  // directory is written as one (save_hf_model_dir), so a failure leaves `out` as it was.
  save_hf_model_dir(
      out, files, base,
      [&](int u, float* w) {
        read_unit(u, w);
        const int l = u - first_layer;
        if (l < 0 || l >= layers) return;  // embedding, final norm, LM head: no adapters
        read_unit(layout.lora_unit(l), adapter.data());
        merge_lora(*cpu, layout, w, adapter.data());
        check_merged_finite(config, layout, w, l);
      },
      dtype, max_shard_bytes);
}

}  // namespace kiln
