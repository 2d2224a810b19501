// What a run leaves in final/ and `kiln export --checkpoint` writes, from a run's units: for full
// fine-tuning a Hugging Face model directory (save_hf_model_dir); for a LoRA run (a layout with
// adapters) a PEFT adapter directory of its adapters (write_peft_adapter), beside which a serving
// stack loads the base.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "kiln/base/checksum.h"
#include "kiln/base/file.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/model_files/output_dtype.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// read_unit(u, out) fills unit u (its numel floats, host memory); for a LoRA layout only the
// adapter units are read. base_name: the adapter's base_model_name_or_path; base: its
// fingerprint (base_fingerprint.h), recorded beside the adapter.
void save_model_output(const fs::path& out, const ModelConfig& config, const HfModelFiles& files,
                       const ParamLayout& layout,
                       const std::function<void(int unit, float* out)>& read_unit, DType dtype,
                       const std::string& base_name,
                       const std::optional<FileDigest>& base = std::nullopt);

// Whether `dir` holds the weights of such an output (written last: the rest is there too).
bool has_model_output(const fs::path& dir, const ParamLayout& layout);

// Host floats save_model_output holds at most: the largest unit, or every adapter.
size_t model_output_host_floats(const ParamLayout& layout);

}  // namespace kiln
