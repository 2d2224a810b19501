// What a recipe can be checked for before any worker starts, by the process that launches them
// (kiln train's agent, or the single process): the model directory, the tokenizer, each data
// file and its first record in data.format, an explicit train.resume checkpoint, an output.dir
// that another run's checkpoints hold, and what output.overwrite would delete. A mistake there then
// fails in one line, at once, instead of once per rank after the workers have formed a group. The
// trainer makes the same checks as it goes (it is also run by external launchers' ranks), so these
// are early, not extra, rules.
#pragma once

#include <optional>
#include <string>

#include "kiln/model/config.h"
#include "kiln/train/recipe.h"

namespace kiln {

// Throws kiln::Error with one line naming the key and the path for the first problem found.
void preflight_checks(const Recipe& recipe);

// model.path's config.json; a missing directory or config.json is an error naming the key, the
// resolved path (and how relative paths resolve). The trainer reads its config through it too.
ModelConfig read_model_config(const Recipe& recipe);

// The refusal of a fresh run (train.resume=none without output.overwrite) into an output.dir
// whose checkpoints' newest is `newest`: preflight_checks says it before any worker starts, the
// trainer again for ranks that an external launcher started.
std::string output_dir_in_use(const Recipe& recipe, const fs::path& newest);

// With output.overwrite=true a fresh run deletes <output.dir>/checkpoints and <output.dir>/final:
// the error when a path the recipe reads (model.path, data.tokenizer, data.train, data.eval,
// data.cache_dir) lies inside them; nullopt when none does.
std::optional<std::string> overwrite_deletes_input(const Recipe& recipe);

}  // namespace kiln
