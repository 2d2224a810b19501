// metrics.jsonl: one JSON object per line, appended and flushed per row, so a crash loses at
// most the line in flight. The one writer for the trainer and the runtime API (report()).
#pragma once

#include <cstdint>
#include <cstdio>

#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {

class MetricsLog {
 public:
  // Opens `path` for appending after trimming it, atomically (temporary file, fsync, rename), to
  // the rows whose "step" is at most keep_through_step (a resumed run trains the later steps
  // again; rows without a step are kept, a torn last line is dropped). keep_through_step <= 0
  // starts an empty file.
  MetricsLog(const fs::path& path, int64_t keep_through_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const Json& row);  // one line; errors name the file

 private:
  fs::path path_;
  std::FILE* f_ = nullptr;
};

}  // namespace kiln
