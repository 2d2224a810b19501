// A model as `kiln eval`, `kiln generate` and `kiln export` name it: a Hugging Face model
// directory, a run directory, or one of a run's checkpoints, with an optional adapter that is a
// PEFT adapter directory or a LoRA run (or one of its checkpoints). The one place those commands
// turn a LoRA run's checkpoint into (base, adapters, LoRA settings), so they cannot disagree:
// the base is the run's recorded recipe's model.path, the adapters the checkpoint's adapter units
// as LoraTensors (exactly the values `kiln export --checkpoint` writes), applied unmerged.
#pragma once

#include <optional>
#include <string>

#include "kiln/base/file.h"
#include "kiln/model/layout.h"
#include "kiln/model/unit_access.h"
#include "kiln/model_files/adapted_model.h"

namespace kiln {

// A run directory (no config.json, manifest.json or adapter_config.json of its own): its final/
// model when that is a full model (config.json), else its newest checkpoint (a LoRA run's final/
// is its last checkpoint's adapters). Any other path as it is.
fs::path resolve_run_path(const fs::path& path);

// A LoRA run's checkpoint: its adapters, to be applied to `base`.
struct LoraCheckpoint {
  fs::path dir;   // the checkpoint (RUN/checkpoints/step-N)
  fs::path base;  // its recipe's model.path
  // config: the one the adapters fit (the checkpoint's config.json, the base's, unless given);
  // adapter: the recipe's lora settings, base_model_name_or_path `base`, the manifest's base
  // fingerprint, the adapter units' tensors (read and verified against the manifest).
  AdaptedModel model;
};

// `path` (resolve_run_path first) when it is a LoRA run's checkpoint (a manifest whose recipe has
// a lora section); nullopt for anything else. With `config`, the adapters are read for that
// config (the base they will meet): a checkpoint of another shape fails naming the unit.
std::optional<LoraCheckpoint> read_lora_checkpoint(const fs::path& path,
                                                   const ModelConfig* config = nullptr);

struct ModelSource {
  fs::path dir;          // what the model was resolved to: its tokenizer and chat template
  fs::path base;         // the base's units: a HF model directory or a full run's checkpoint
  AdaptedModel model;    // the base's config and the adapter, if any
  std::string adapters;  // where the adapters came from (for messages); "" without
};

// --model M [--adapter A]: M a HF model directory, a run or a checkpoint (a LoRA run's: its base
// and its adapters); A a PEFT adapter directory or a LoRA run or checkpoint, fitted to M. Reads
// the configs and the adapters, no base weight. Errors are one line naming the path.
ModelSource open_model_source(const fs::path& model, const fs::path& adapter);

// Before s's base weights meet its adapters: adapters that recorded their base's fingerprint and
// meet another base (M's weights, or the recipe's model.path replaced since the run) fail naming
// both, unless `allow_other_base` (then a warning). Nothing to check without adapters, without a
// recorded fingerprint, or on a full run's checkpoint as the base.
void check_source_base(const ModelSource& s, bool allow_other_base);

// The units of `layout` (which must outlive the reader) from `dir`: a HF model directory's weight
// files (checked against the layout first) or a full run's checkpoint's shards (verified first).
// The one way every command reads a base's weights.
UnitReader weights_unit_reader(const fs::path& dir, const ParamLayout& layout);

// Every unit of ParamLayout(s.model.config, s.model.lora()) = `layout` into `store`.
void load_model_source(const ModelSource& s, const ParamLayout& layout, ParamStore& store);

}  // namespace kiln
