// Which run a checkpoint belongs to. The keys run_identity_keys() lists (recipe.h: marked in
// their rows of the recipe's schema, recipe_schema.cc) define a run: its weights, data, order and
// optimisation. A checkpoint written under another value of any of them is another run's, and
// train.resume=auto refuses it, naming the key. Everything else may change on resume: the step
// budget (train.max_steps, train.epochs), logging, evaluation, checkpoint cadence, output,
// recomputation, the device, the distribution (world size and strategy reshard) and failure
// handling.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/train/recipe.h"

namespace kiln {

struct RecipeKeyChange {
  std::string key, before, after;  // the values as recipe_to_yaml writes them
};

// Every identity key with its value in `recipe` (as recipe_to_yaml writes it), in key order: what
// the agents of a multi-node job compare before they start (launch/formation.h).
std::vector<std::pair<std::string, std::string>> run_identity_values(const Recipe& recipe);

// The first identity key (in documentation order) whose value differs; nullopt when none does.
std::optional<RecipeKeyChange> run_identity_change(const Recipe& before, const Recipe& after);

// The recipe a checkpoint was written with (its manifest's "recipe"). kiln::Error naming the
// manifest when it has none or it does not parse.
Recipe checkpoint_recipe(const fs::path& checkpoint_dir);

}  // namespace kiln
