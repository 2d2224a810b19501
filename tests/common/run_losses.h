// The per-step losses a run wrote to <run>/metrics.jsonl, in order.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/base/json.h"

namespace kiln::testing {

inline std::vector<double> run_losses(const std::filesystem::path& run) {
  std::vector<double> out;
  std::ifstream f(run / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    out.push_back(parse_json(line, "metrics").at("loss").get<double>());
  }
  return out;
}

}  // namespace kiln::testing
