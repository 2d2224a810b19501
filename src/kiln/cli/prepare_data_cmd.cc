// kiln prepare-data RECIPE.yaml [key=value ...]: reads and tokenizes the recipe's training data
// into its tokenized cache ahead of training, and prints the counts (docs/recipe.md, "Counts and
// the tokenized cache"). `kiln train` with the same data settings then logs "data cache hit".
#include <cstdio>
#include <limits>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/cli/commands.h"
#include "kiln/model/config.h"
#include "kiln/train/train_data.h"

namespace kiln::cli {

namespace {
// One data.train file's counts and cache, one line each.
void report_prepared(const TokenizedDataset& data, const std::string& file, DataFormat format) {
  const DataStats& s = data.stats();
  std::printf(
      "%s: %lld examples, %lld tokens (%lld take loss); %lld truncated, %lld dropped, "
      "%lld bad lines skipped\n",
      file.c_str(), static_cast<long long>(s.examples), static_cast<long long>(s.tokens),
      static_cast<long long>(s.targets), static_cast<long long>(s.truncated),
      static_cast<long long>(s.dropped), static_cast<long long>(s.skipped));
  if (!data.cache_path().empty()) {
    std::printf("cache %s: %s\n", data.from_cache_hit() ? "hit" : "written",
                data.cache_path().c_str());
  } else {
    std::printf("no cache (%s)\n", format == DataFormat::kTokens ? "format tokens is read directly"
                                                                 : "it could not be written");
  }
}
}  // namespace

Command add_prepare_data(CLI::App& app) {
  struct Opts {
    std::string recipe;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "prepare-data", "Tokenize a recipe's training data into its cache ahead of training");
  sub->add_option("recipe", o->recipe, "Recipe YAML (keys: docs/recipe.md)")->required();
  sub->add_option("overrides", o->overrides, "Overrides such as data.seq_len=1024");
  sub->footer(
      "Uses the recipe's data section (each data.train file in its own format or data.format: " +
      data_format_choices() +
      "; tokenizer, seq_len, overlong, train_on_prompt, skip_bad_lines, cache_dir) and "
      "model.path's config.json to check token ids.");
  return {sub, [o] {
            const Recipe r = load_recipe(o->recipe, o->overrides);
            const fs::path config = fs::path(r.model.path) / "config.json";
            int64_t vocab_size = std::numeric_limits<int32_t>::max();
            if (fs::exists(config)) {
              vocab_size = read_config(config).vocab_size;
            } else {
              KILN_LOG_WARN("{}: not found; token ids are not checked against a vocabulary",
                            config.string());
            }
            for (const Recipe::TrainFile& file : r.data.train) {
              report_prepared(load_dataset(data_options(r, file), vocab_size), file.path,
                              train_file_format(r, file));
            }
            return 0;
          }};
}

}  // namespace kiln::cli
