// Folding adapters into the base: W_t += s B_t A_t for each target t of a layer, as PEFT's
// merge_and_unload does. The merged model's forward equals the base's with the adapters (within
// rounding); `kiln export --merge` writes it as a Hugging Face model.
#pragma once

#include "kiln/kernels/ops.h"
#include "kiln/model/layout.h"

namespace kiln {

// layer_params: layer `layer`'s base unit (fp32, device memory of `be`), updated in place;
// adapter_params: the same layer's adapter unit (fp32). `layout` has LoRA. Returns once the
// products have run.
void merge_lora(const Backend& be, const ParamLayout& layout, float* layer_params,
                const float* adapter_params);

// Where target t's base weight W_t (out, in) lies in a layer's base unit (an offset in floats).
size_t lora_target_offset(const ParamLayout& layout, LoraTarget t);

}  // namespace kiln
