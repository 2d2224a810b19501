// A fixture of the independent references (tools/decoder_reference.py, tools/dpo_reference.py):
// a Hugging Face directory (config.json, model.safetensors) and, for a LoRA case, PEFT's adapter
// (adapter_config.json, adapter_model.safetensors), loaded into a ParamStore of the model's
// layout.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/test_backend.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"
#include "kiln/model/layout.h"
#include "kiln/model/lora_config.h"
#include "kiln/model/unit_access.h"
#include "kiln/model_files/hf_checkpoint.h"

namespace kiln::testing {

// PEFT's adapter_config.json as a LoraConfig.
inline LoraConfig read_adapter_config(const std::filesystem::path& file) {
  const Json j = read_json_file(file);
  LoraConfig l;
  l.rank = j.at("r").get<int64_t>();
  l.alpha = j.at("lora_alpha").get<double>();
  l.rslora = j.at("use_rslora").get<bool>();
  l.dropout = j.at("lora_dropout").get<double>();
  l.targets =
      resolve_lora_targets(j.at("target_modules").get<std::vector<std::string>>(), file.string());
  return l;
}

// The base's weights of `dir` into `store` (of `layout`, whose first units are the base's), then,
// when the layout has adapters, adapter_model.safetensors' into the adapter units.
inline void load_reference_model(const std::filesystem::path& dir, const ModelConfig& config,
                                 const ParamLayout& layout, ParamStore& store) {
  const ParamLayout base(config);
  ParamStore weights(base, cpu_fp32(), false);
  load_hf_weights(dir, base, weights);
  for (int u = 0; u < base.num_units(); ++u) {
    std::copy_n(weights.params(u).data(), weights.params(u).size(), store.params(u).data());
  }
  if (!layout.has_lora()) return;
  CheckpointReader adapter(dir / "adapter_model.safetensors");
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    const int u = layout.lora_unit(l);
    for (const auto& e : layout.units()[u].entries) {
      adapter.read_f32(e.name, e.shape, store.params(u).data() + e.offset);
    }
  }
}

}  // namespace kiln::testing
