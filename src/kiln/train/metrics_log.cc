#include "kiln/train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <sstream>

#include "kiln/base/error.h"

namespace kiln {

namespace {

// The lines of `path` without a "step" or with one of at most `through`; a torn last line from a
// crash is dropped.
std::string rows_through(const fs::path& path, int64_t through) {
  std::string kept;
  if (!fs::exists(path)) return kept;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    try {
      const Json j = parse_json(line, path.string());
      if (!j.contains("step") || j.at("step").get<int64_t>() <= through) kept += line + "\n";
    } catch (const std::exception&) {
      // a torn last line from a crash
    }
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const fs::path& path, int64_t keep_through_step) : path_(path) {
  open(keep_through_step > 0 ? rows_through(path, keep_through_step) : std::string());
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::open(const std::string& rows) {
  if (!path_.parent_path().empty()) fs::create_directories(path_.parent_path());
  write_file_atomic(path_, rows);
  f_ = std::fopen(path_.c_str(), "a");
  if (f_ == nullptr) {
    fail("{}: cannot open for appending: {}", path_.string(), std::strerror(errno));
  }
}

void MetricsLog::rewind(int64_t step) {
  std::fclose(f_);
  f_ = nullptr;
  open(rows_through(path_, step));
}

void MetricsLog::write(const Json& row) {
  const std::string line = row.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    fail("{}: write failed", path_.string());
  }
}

}  // namespace kiln
