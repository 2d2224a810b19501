// Writing out a model with LoRA adapters, from its units (ParamLayout with LoRA: the base's units,
// then one adapter unit per layer), whatever holds them: `kiln export --adapter` (a PEFT adapter
// applied to a HF model, model/adapted_model.h) and a LoRA run's adapter-only checkpoints
// (`kiln export --checkpoint RUN`) both call these with a UnitReader over their units.
//   export_lora_adapter: the adapters as a PEFT adapter directory (write_peft_adapter), the
//     tensors in `dtype`, with the tokenizer files and chat template of `files`, and the base's
//     fingerprint when known (base_fingerprint.h); reads only the adapter units.
//   export_lora_merged:  a complete Hugging Face model directory (save_hf_model_dir: config,
//     tokenizer, chat template, generation config, safetensors in `dtype`) whose every target
//     weight is W + s B A (merge_lora, PEFT's merge_and_unload), merged in fp32 on the host
//     before the one rounding to `dtype`; streamed one layer at a time (a base unit and its
//     adapter unit in memory, never the model).
// Both refuse a non-finite adapter value before anything is written, and the merge a non-finite
// merged weight (removing the directory it started, unless it was there before), naming the
// tensor: a NaN would otherwise be written and served.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/base/checksum.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/model_files/adapted_model.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// `layout` has LoRA (its lora() is what adapter_config.json says, dropout included) and is
// ParamLayout(config, layout.lora()); base_name: adapter_config.json's base_model_name_or_path.
void export_lora_adapter(const fs::path& out, const ModelConfig& config, const ParamLayout& layout,
                         const UnitReader& read_unit, const std::string& base_name,
                         const HfModelFiles& files, DType dtype,
                         const std::optional<FileDigest>& base = std::nullopt);

// `layout` as above; the output is the base's layout (ParamLayout(config)), its units merged.
void export_lora_merged(const fs::path& out, const ModelConfig& config, const ParamLayout& layout,
                        const UnitReader& read_unit, const HfModelFiles& files, DType dtype,
                        uint64_t max_shard_bytes = 5'000'000'000);

}  // namespace kiln
