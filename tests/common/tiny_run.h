// A tiny run for the tests that drive the kiln binary: a tiny model written by `kiln init` into a
// fresh directory, and a recipe training it on the demo tokens (setup_tiny_run: two local
// workers; the other helpers for tests that write the rest of the recipe themselves).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "kiln/base/file.h"

namespace kiln::testing {

struct TinyRunShape {
  int seq_len = 64;
  int max_steps = 6;
  int micro_batch_size = 2;
  int timeout_s = 5;
  // The base model directory carries Qwen's real tokenizer.json (11 MB), as a user's does: every
  // checkpoint and final/ hold a copy of it.
  bool real_tokenizer = false;
};

// <dir>/init: a tiny model freshly written by `kiln init --config <preset> --seed <seed>`.
inline std::filesystem::path init_tiny_model(const std::filesystem::path& dir, int seed,
                                             const std::string& preset = "tiny") {
  const std::filesystem::path init = dir / "init";
  const CmdResult r = run_kiln("init --config " + preset + " --seed " + std::to_string(seed) +
                               " --out " + init.string());
  EXPECT_EQ(r.code, 0) << r.out;
  return init;
}

// The opening of a recipe for the model at <dir>/init training on the demo tokens: its model
// and data sections.
inline std::string tiny_recipe_head(const std::filesystem::path& dir, int seq_len = 64) {
  return "model:\n  path: " + (dir / "init").string() + "\ndata:\n  train: " + KILN_SOURCE_DIR +
         "/assets/demo/tokens.jsonl\n  seq_len: " + std::to_string(seq_len) + "\n";
}

// <tmp>/<prefix>_<name>_<pid>/{init, recipe.yaml}: a tiny model from `kiln init --config <preset>
// --seed <seed>`, and a recipe of tiny_recipe_head followed by `sections` (the rest of the
// recipe, which the test writes).
inline std::filesystem::path write_tiny_run(const std::string& prefix, const std::string& name,
                                            int seed, const std::string& sections,
                                            const std::string& preset = "tiny") {
  const std::filesystem::path d = fresh_dir(prefix, name);
  init_tiny_model(d, seed, preset);
  write_file_atomic(d / "recipe.yaml", tiny_recipe_head(d) + sections);
  return d;
}

// <tmp>/<prefix>_<name>_<pid>/{init, recipe.yaml}; the recipe's output.dir is <that>/run.
inline std::filesystem::path setup_tiny_run(const std::string& prefix, const std::string& name,
                                            const TinyRunShape& s) {
  const std::filesystem::path d = fresh_dir(prefix, name);
  init_tiny_model(d, 1);
  if (s.real_tokenizer) {
    std::filesystem::copy_file(
        std::filesystem::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json",
        d / "init/tokenizer.json", std::filesystem::copy_options::overwrite_existing);
  }
  write_file_atomic(
      d / "recipe.yaml",
      tiny_recipe_head(d, s.seq_len) + "train:\n  max_steps: " + std::to_string(s.max_steps) +
          "\n  micro_batch_size: " + std::to_string(s.micro_batch_size) +
          "\ndist:\n  nproc_per_node: 2\n  timeout_s: " + std::to_string(s.timeout_s) +
          "\n  threads_per_worker: 1\noutput:\n  dir: " + (d / "run").string() + "\n");
  return d;
}

}  // namespace kiln::testing
