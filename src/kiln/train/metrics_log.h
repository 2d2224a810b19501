// metrics.jsonl: one JSON object per line, appended and flushed per row, so a crash loses at
// most the line in flight. WorkerContext owns the run's one writer (runtime.h): the trainer's
// rows and a user function's report() go through it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

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
  // Drops the rows written so far whose "step" is past `step` (rows without a step stay), the
  // same way: the run continues after `step`.
  void rewind(int64_t step);

 private:
  void open(const std::string& rows);  // writes `rows` atomically, then appends after them
  fs::path path_;
  std::FILE* f_ = nullptr;
};

}  // namespace kiln
