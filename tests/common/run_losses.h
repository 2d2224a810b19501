// What a run wrote to <run>/metrics.jsonl: every row, in order, or just the per-step losses.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/base/json.h"

namespace kiln::testing {

inline std::vector<Json> run_metric_rows(const std::filesystem::path& run) {
  const std::filesystem::path path = run / "metrics.jsonl";
  std::vector<Json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    out.push_back(parse_json(line, path.string() + ":" + std::to_string(out.size() + 1)));
  }
  return out;
}

inline std::vector<double> run_losses(const std::filesystem::path& run) {
  std::vector<double> out;
  for (const Json& row : run_metric_rows(run)) out.push_back(row.at("loss").get<double>());
  return out;
}

}  // namespace kiln::testing
