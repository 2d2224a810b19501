#include "kiln/cli/model_options.h"

namespace kiln::cli {

void add_model_options(CLI::App* sub, std::string& model, std::string& adapter,
                       bool& allow_other_base) {
  sub->add_option("--model", model,
                  "Model directory (HF layout: config.json, safetensors) or hub id, run directory "
                  "or sharded checkpoint directory (holding manifest.json; a LoRA run's: its base "
                  "with its adapters)")
      ->required();
  sub->add_option("--adapter", adapter,
                  "A PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors), "
                  "or a LoRA run or checkpoint, applied to --model");
  sub->add_flag("--allow-other-base", allow_other_base,
                "Apply adapters to a base other than the one they were trained on");
}

}  // namespace kiln::cli
