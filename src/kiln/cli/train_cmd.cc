// kiln train RECIPE.yaml [key=value ...]
#include "kiln/cli/commands.h"
#include "kiln/train/trainer.h"

namespace kiln::cli {

Command add_train(CLI::App& app) {
  struct Opts {
    std::string recipe;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "train", "Train a model from a YAML recipe; key=value arguments override recipe keys");
  sub->add_option("recipe", o->recipe, "Recipe YAML (keys: docs/recipe.md)")->required();
  sub->add_option("overrides", o->overrides, "Overrides such as optimizer.lr=1e-4");
  sub->footer(
      "Writes <output.dir>/metrics.jsonl (one JSON object per step), recipe.yaml (effective "
      "recipe) and final/ (the trained model, HF layout).");
  return {sub, [o] {
            Recipe r = load_recipe(o->recipe, o->overrides);
            TrainResult res = train(r);
            std::fprintf(stderr, "trained %lld steps: loss %.4f -> %.4f; model in %s\n",
                         static_cast<long long>(res.steps), res.first_loss, res.last_loss,
                         res.model_dir.c_str());
            return 0;
          }};
}

}  // namespace kiln::cli
