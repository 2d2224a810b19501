// The recipe's schema: one row per key, in documentation order. A row names the key, says whether
// it defines the run (run_identity.h: a checkpoint written under another value is another run's),
// reads and checks its value into a Recipe, and writes it back. The reader (parse_recipe), the
// key lists (recipe_keys, run_identity_keys) and the YAML writer (recipe_to_yaml) all walk these
// rows; the defaults are the Recipe struct's (recipe.h). Internal to kiln_recipe.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "kiln/train/recipe.h"
#include "kiln/train/recipe_reader.h"

namespace kiln {

struct RecipeKey {
  std::string name;  // "optimizer.lr"
  bool defines_run;
  // Reads the key's value, when the recipe sets one, into the recipe, checking it alone (checks
  // across keys are validate's, recipe.cc); leaves the default otherwise.
  std::function<void(RecipeReader&, Recipe&)> read;
  // Writes the key's value (the emitter is after the key).
  std::function<void(YAML::Emitter&, const Recipe&)> write;
};

const std::vector<RecipeKey>& recipe_schema();

}  // namespace kiln
