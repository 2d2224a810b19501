// Between a LoRA run's adapter units (lora_layout.h: one flat unit per layer, what FSDP shards
// and checkpoints hold) and LoraTensors (peft_adapter.h: per layer and target, what a PEFT
// adapter directory holds). Each A and B is one contiguous tensor of its unit, named as PEFT
// names it, so both directions copy tensor by tensor.
#pragma once

#include <cstdint>

#include "kiln/model/layout.h"
#include "kiln/model_files/peft_adapter.h"

namespace kiln {

// unit (the numel of layer `layer`'s adapter unit, host fp32) = that layer's A's and B's of
// `tensors`. `layout` has LoRA, and `tensors` the same targets and rank.
void lora_unit_from_tensors(const ParamLayout& layout, const LoraTensors& tensors, int64_t layer,
                            float* unit);
// The inverse: `tensors`' A's and B's of layer `layer` = unit's.
void lora_tensors_from_unit(const ParamLayout& layout, const float* unit, int64_t layer,
                            LoraTensors& tensors);

}  // namespace kiln
