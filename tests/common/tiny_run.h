// A run directory for launcher tests: a freshly initialised tiny model (seed 1) and a recipe
// training it on the demo tokens with two local workers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/run_kiln.h"
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

// <tmp>/<prefix>_<name>_<pid>/{init, recipe.yaml}; the recipe's output.dir is <that>/run.
inline std::filesystem::path setup_tiny_run(const std::string& prefix, const std::string& name,
                                            const TinyRunShape& s) {
  namespace fs = std::filesystem;
  const fs::path d =
      fs::temp_directory_path() / (prefix + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  auto r = run_kiln("init --config tiny --seed 1 --out " + (d / "init").string());
  EXPECT_EQ(r.code, 0) << r.out;
  if (s.real_tokenizer) {
    fs::copy_file(fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json",
                  d / "init/tokenizer.json", fs::copy_options::overwrite_existing);
  }
  write_file_atomic(
      d / "recipe.yaml",
      "model:\n  path: " + (d / "init").string() + "\ndata:\n  train: " + KILN_SOURCE_DIR +
          "/assets/demo/tokens.jsonl\n  seq_len: " + std::to_string(s.seq_len) +
          "\ntrain:\n  max_steps: " + std::to_string(s.max_steps) +
          "\n  micro_batch_size: " + std::to_string(s.micro_batch_size) +
          "\ndist:\n  nproc_per_node: 2\n  timeout_s: " + std::to_string(s.timeout_s) +
          "\n  threads_per_worker: 1\noutput:\n  dir: " + (d / "run").string() + "\n");
  return d;
}

}  // namespace kiln::testing
