#include "kiln/train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <sstream>

#include "kiln/base/error.h"

namespace kiln {

MetricsLog::MetricsLog(const fs::path& path, int64_t keep_through_step) : path_(path) {
  std::string kept;
  if (keep_through_step > 0 && fs::exists(path)) {
    std::istringstream in(read_file(path));
    for (std::string line; std::getline(in, line);) {
      try {
        const Json j = parse_json(line, path.string());
        if (!j.contains("step") || j.at("step").get<int64_t>() <= keep_through_step) {
          kept += line + "\n";
        }
      } catch (const std::exception&) {
        // a torn last line from a crash
      }
    }
  }
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  write_file_atomic(path, kept);
  f_ = std::fopen(path.c_str(), "a");
  if (f_ == nullptr) {
    fail("{}: cannot open for appending: {}", path.string(), std::strerror(errno));
  }
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const Json& row) {
  const std::string line = row.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    fail("{}: write failed", path_.string());
  }
}

}  // namespace kiln
