// A model as `kiln eval`, `kiln generate` and `kiln export` read it: a base (a Hugging Face model
// directory, or any source of its units) with an optional PEFT adapter directory applied. With an
// adapter the layout is ParamLayout(config, the adapter's LoraConfig): the base's units, then one
// adapter unit per layer (layout.h), which lora_unit_from_tensors fills from the adapter's file.
// The one place those commands turn "model + adapter" into units, so they cannot disagree.
#pragma once

#include <functional>
#include <optional>

#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/model/unit_access.h"
#include "kiln/model_files/peft_adapter.h"

namespace kiln {

// read_unit(u, out): unit u of some layout into out (its numel floats, host fp32).
using UnitReader = std::function<void(int unit, float* out)>;

struct AdaptedModel {
  ModelConfig config;                  // the base's config.json
  std::optional<PeftAdapter> adapter;  // read against config: every name and shape fits it

  // The adapter's settings as its adapter_config.json has them (dropout included), or none: the
  // layout's (ParamLayout(config, lora())) and what an adapter export writes back.
  std::optional<LoraConfig> lora() const;
  // The same with dropout 0, for a Decoder or Generator: evaluation and decoding are inference,
  // where PEFT applies no dropout (the Decoder refuses dropout > 0, a training setting).
  std::optional<LoraConfig> inference_lora() const;
};

// Reads `model`/config.json and, when `adapter_dir` is not empty, the PEFT adapter there against
// it (read_peft_adapter). Reads no base weight, writes nothing: a directory without
// adapter_config.json, or an adapter whose names or shapes do not fit the base, fails here with
// one line naming the file (and tensor and shape).
AdaptedModel read_adapted_model(const fs::path& model, const fs::path& adapter_dir);

// Reads units of `layout` (the base's units, then m's adapter units when it has LoRA): a base
// unit through read_base, an adapter unit from m.adapter's tensors. The layout has LoRA exactly
// when m has an adapter, with the adapter's rank and targets. m and layout must outlive the
// reader.
UnitReader adapted_unit_reader(const AdaptedModel& m, const ParamLayout& layout,
                               UnitReader read_base);

// Every unit of `layout` into `store` (whose layout it is), one host unit at a time.
void load_units(const ParamLayout& layout, const UnitReader& read_unit, ParamStore& store);

}  // namespace kiln
