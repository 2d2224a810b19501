// The model options `kiln eval` and `kiln generate` share: --model, --adapter and
// --allow-other-base, with one help text each (train/checkpoint_model.h's open_model_source reads
// what they name).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace kiln::cli {

// Adds the required --model (into `model`), --adapter (into `adapter`) and --allow-other-base
// (into `allow_other_base`) to `sub`.
void add_model_options(CLI::App* sub, std::string& model, std::string& adapter,
                       bool& allow_other_base);

}  // namespace kiln::cli
