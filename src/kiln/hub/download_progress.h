// What a download shows: on a terminal one progress bar redrawn in place (bytes, rate, files);
// otherwise one line per file, so a log reads as a list.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace kiln {

class DownloadProgress {
 public:
  virtual ~DownloadProgress() = default;
  // `files` to consider, of which `to_fetch` bytes are not in the cache yet.
  virtual void begin(const std::string& repo, size_t files, uint64_t to_fetch) = 0;
  virtual void bytes(uint64_t n) = 0;  // from any download thread
  // One file settled: `fetched` bytes downloaded now, or it was already in the cache.
  virtual void file_done(const std::string& path, uint64_t size, bool fetched) = 0;
  virtual void end() = 0;
};

// A bar when `out` is a terminal, else lines; written to `out`.
std::unique_ptr<DownloadProgress> make_download_progress(std::FILE* out);
// Nothing shown (tests, library callers).
std::unique_ptr<DownloadProgress> silent_download_progress();

// "1.5 KiB", "1.19 GiB": one formatting of sizes for the progress and the summary.
std::string human_bytes(uint64_t n);

}  // namespace kiln
