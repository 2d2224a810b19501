#include "kiln/hub/download_progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

class LineProgress : public DownloadProgress {
 public:
  explicit LineProgress(std::FILE* out) : out_(out) {}
  void begin(const std::string&, size_t, uint64_t) override {}
  void bytes(uint64_t) override {}
  void file_done(const std::string& path, uint64_t size, bool fetched) override {
    std::lock_guard<std::mutex> g(mu_);
    std::fprintf(out_, "%s: %s %s\n", path.c_str(), human_bytes(size).c_str(),
                 fetched ? "downloaded" : "already in the cache");
    std::fflush(out_);
  }
  void end() override {}

 private:
  std::FILE* out_;
  std::mutex mu_;
};

class BarProgress : public DownloadProgress {
 public:
  explicit BarProgress(std::FILE* out) : out_(out) {}
  void begin(const std::string& repo, size_t files, uint64_t to_fetch) override {
    repo_ = repo;
    files_ = files;
    total_ = to_fetch;
    start_ = Clock::now();
  }
  void bytes(uint64_t n) override {
    done_ += n;
    draw(false);
  }
  void file_done(const std::string&, uint64_t, bool) override {
    ++files_done_;
    draw(true);
  }
  void end() override {
    draw(true);
    std::fputc('\n', out_);
    std::fflush(out_);
  }

 private:
  // [#########.........]  45%  512 MiB / 1.1 GiB  40.2 MiB/s  3/9 files
  void draw(bool force) {
    std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
    if (!g.owns_lock()) return;
    const auto now = Clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const uint64_t done = done_.load();
    const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(frac * kWidth);
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    std::fprintf(out_, "\r%s [%s%s] %3d%%  %s / %s  %s/s  %zu/%zu files ", repo_.c_str(),
                 std::string(fill, '#').c_str(), std::string(kWidth - fill, '.').c_str(),
                 static_cast<int>(frac * 100), human_bytes(done).c_str(),
                 human_bytes(total_).c_str(), human_bytes(static_cast<uint64_t>(rate)).c_str(),
                 files_done_.load(), files_);
    std::fflush(out_);
  }

  std::FILE* out_;
  std::mutex mu_;
  std::string repo_;
  size_t files_ = 0;
  uint64_t total_ = 0;
  std::atomic<uint64_t> done_{0};
  std::atomic<size_t> files_done_{0};
  Clock::time_point start_, last_;
};

class Silent : public DownloadProgress {
 public:
  void begin(const std::string&, size_t, uint64_t) override {}
  void bytes(uint64_t) override {}
  void file_done(const std::string&, uint64_t, bool) override {}
  void end() override {}
};

}  // namespace

std::unique_ptr<DownloadProgress> make_download_progress(std::FILE* out) {
  if (::isatty(::fileno(out))) return std::make_unique<BarProgress>(out);
  return std::make_unique<LineProgress>(out);
}

std::unique_ptr<DownloadProgress> silent_download_progress() { return std::make_unique<Silent>(); }

std::string human_bytes(uint64_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.{}f} {}", v, v < 10 ? 2 : 1, kUnits[u]);
}

}  // namespace kiln
