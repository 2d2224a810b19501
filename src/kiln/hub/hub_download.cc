#include "kiln/hub/hub_download.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/log.h"
#include "kiln/hub/hub_api.h"
#include "kiln/hub/hub_cache.h"

namespace kiln {

namespace {

bool matches(const std::string& pattern, const std::string& path) {
  const std::string p = !pattern.empty() && pattern.back() == '/' ? pattern + "*" : pattern;
  return ::fnmatch(p.c_str(), path.c_str(), 0) == 0;
}

// What every download thread shares.
struct Job {
  const HubSettings& hub;
  const RepoRef& ref;
  const HubCache& cache;
  const std::string& commit;
  DownloadProgress& progress;
  std::atomic<bool> stop{false};
  std::atomic<size_t> fetched{0};
  std::atomic<uint64_t> bytes{0};
};

// An open file appended to; closed on destruction.
class Appender {
 public:
  explicit Appender(const fs::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  }
  ~Appender() {
    if (fd_ >= 0) ::close(fd_);
  }
  Appender(const Appender&) = delete;
  Appender& operator=(const Appender&) = delete;
  void restart() {
    if (::ftruncate(fd_, 0) != 0)
      fail("{}: cannot truncate: {}", path_.string(), std::strerror(errno));
  }
  bool write(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  void sync() {
    if (::fsync(fd_) != 0) fail("{}: fsync: {}", path_.string(), std::strerror(errno));
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

// "bytes START-END/TOTAL" -> START; -1 when it is not that shape.
int64_t content_range_start(const std::string& v) {
  if (v.rfind("bytes ", 0) != 0) return -1;
  char* end = nullptr;
  const long long s = std::strtoll(v.c_str() + 6, &end, 10);
  return end && *end == '-' ? s : -1;
}

uint64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  const uintmax_t n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

// One attempt's transfer into `part` (resuming from its length). Returns the response; the
// sink refuses a 206 that does not start where the file ends, and starts over on a 200.
HttpResponse fetch_once(HttpClient& http, Job& job, const RepoFile& f, const fs::path& part,
                        std::string& range_error) {
  const uint64_t have = size_or_zero(part);
  Appender out(part);
  std::vector<std::string> headers;
  if (have > 0) headers.push_back("Range: bytes=" + std::to_string(have) + "-");
  bool first = true;
  const BodySink sink = [&](const HttpResponse& head, const char* data, size_t n) {
    if (job.stop.load()) return false;
    if (first) {
      first = false;
      if (head.status == 206) {
        const int64_t start = content_range_start(head.header("content-range"));
        if (start != static_cast<int64_t>(have)) {
          range_error = "asked for bytes from " + std::to_string(have) + ", got Content-Range '" +
                        head.header("content-range") + "'";
          return false;
        }
      } else if (have > 0) {
        out.restart();  // the server ignored the Range: the body is the whole file
      }
    }
    if (!out.write(data, n)) return false;
    job.progress.bytes(n);
    job.bytes += n;
    return true;
  };
  const HttpResponse r =
      http.request(resolve_url(http, job.hub, job.ref.id, job.commit, f.path), headers, &sink);
  if (r.ok() && !r.aborted) out.sync();
  return r;
}

// Fetches f into blobs/<ETAG>.incomplete and checks it. False when the job was stopped.
bool fetch_blob(HttpClient& http, Job& job, const RepoFile& f, const fs::path& part) {
  for (int attempt = 1;; ++attempt) {
    if (size_or_zero(part) > f.size) fs::remove(part);
    std::string range_error;
    const HttpResponse r = fetch_once(http, job, f, part, range_error);
    if (job.stop.load()) return false;
    if (!range_error.empty()) {
      fs::remove(part);
      fail("{}: {}: {}; removed the partial file, run again", job.ref.id, f.path, range_error);
    }
    if (r.status == 416) {  // the partial file is not a prefix the server knows: start over
      fs::remove(part);
    } else if (r.ok() && !r.aborted) {
      if (size_or_zero(part) == f.size) return true;
      KILN_LOG_WARN("{}: {}: {} of {} bytes arrived; resuming", job.ref.id, f.path,
                    size_or_zero(part), f.size);
    } else if (!r.retryable()) {
      fail_response(r, job.hub, job.ref, f.path);
    }
    if (attempt >= http.policy().attempts) {
      fail("{}: {}: gave up after {} tries: {}", job.ref.id, f.path, attempt,
           r.error.empty() ? "HTTP " + std::to_string(r.status) : r.error);
    }
    KILN_LOG_INFO("{}: {}: {}; try {} of {} resumes at byte {}", job.ref.id, f.path,
                  r.error.empty() ? "HTTP " + std::to_string(r.status) : r.error, attempt + 1,
                  http.policy().attempts, size_or_zero(part));
    http.wait_before_retry(attempt, r);
  }
}

// Makes snapshots/<COMMIT>/<f.path> lead to a checked blob.
void settle_file(HttpClient& http, Job& job, const RepoFile& f) {
  const fs::path pointer = job.cache.snapshot(job.commit) / f.path;
  std::error_code ec;
  if (fs::exists(pointer, ec) && size_or_zero(pointer) == f.size) {
    job.progress.file_done(f.path, f.size, false);
    return;
  }
  const FileLock lock(job.cache.lock_file(f.etag));
  const fs::path blob = job.cache.blob(f.etag);
  bool fetched = false;
  if (!fs::exists(blob, ec) || size_or_zero(blob) != f.size) {
    const fs::path part = job.cache.incomplete(f.etag);
    fs::create_directories(part.parent_path());
    if (!fetch_blob(http, job, f, part)) return;
    const std::string digest = file_digest(part, f.hash);
    if (digest != f.etag) {
      fs::remove(part);
      fail(
          "{}: {}: {} mismatch: the hub's metadata says {}, the download has {}; removed it, "
          "nothing linked",
          job.ref.id, f.path, hash_kind_name(f.hash), f.etag, digest);
    }
    fs::rename(part, blob);
    fsync_dir(blob.parent_path());
    fetched = true;
    ++job.fetched;
  }
  job.cache.link(job.commit, f.path, f.etag);
  job.progress.file_done(f.path, f.size, fetched);
}

// Runs settle_file over `files` on up to `parallel` threads; the first error stops the rest
// and is rethrown.
void settle_all(Job& job, const std::vector<RepoFile>& files, const DownloadOptions& opt) {
  std::atomic<size_t> next{0};
  std::exception_ptr first;
  std::mutex mu;
  const auto worker = [&] {
    HttpClient http(job.hub.token, opt.retry);
    while (!job.stop.load()) {
      const size_t i = next++;
      if (i >= files.size()) break;
      try {
        settle_file(http, job, files[i]);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!first) first = std::current_exception();
        job.stop = true;
      }
    }
  };
  const size_t n = std::min<size_t>(std::max(opt.parallel, 1), std::max<size_t>(files.size(), 1));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < n; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

DownloadResult from_cache_only(const HubSettings& hub, const RepoRef& ref) {
  const std::optional<fs::path> snap = cached_snapshot(hub.cache_dir, ref);
  if (!snap) {
    fail("{}: revision '{}' is not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set",
         ref.id, ref.revision, hub.cache_dir.string());
  }
  DownloadResult res{*snap, snap->filename().string()};
  for (const auto& e : fs::recursive_directory_iterator(*snap)) res.cached += !e.is_directory();
  return res;
}

}  // namespace

const std::vector<std::string>& default_download_excludes() {
  static const std::vector<std::string> kExcludes = {
      "*.bin", "*.pth", "*.pt", "*.h5", "*.msgpack", "*.onnx", "*.gguf", "*.ot", "original/"};
  return kExcludes;
}

bool selected_for_download(const std::string& path, const DownloadOptions& opt) {
  const bool defaults = opt.include.empty() && opt.exclude.empty();
  const std::vector<std::string>& exclude = defaults ? default_download_excludes() : opt.exclude;
  const auto hit = [&](const std::string& p) { return matches(p, path); };
  if (!opt.include.empty() && std::none_of(opt.include.begin(), opt.include.end(), hit)) {
    return false;
  }
  return std::none_of(exclude.begin(), exclude.end(), hit);
}

DownloadResult download_repo(const HubSettings& hub, const RepoRef& ref, const DownloadOptions& opt,
                             DownloadProgress& progress) {
  if (hub.offline) return from_cache_only(hub, ref);
  HttpClient http(hub.token, opt.retry);
  RepoRevision rev = fetch_revision(http, hub, ref);
  std::vector<RepoFile> files;
  for (RepoFile& f : rev.files) {
    if (selected_for_download(f.path, opt)) files.push_back(std::move(f));
  }
  if (files.empty()) {
    fail("{}: no file of revision '{}' ({} files) is selected by the include/exclude patterns",
         ref.id, ref.revision, rev.files.size());
  }
  std::stable_sort(files.begin(), files.end(),
                   [](const RepoFile& a, const RepoFile& b) { return a.size > b.size; });
  const HubCache cache(hub.cache_dir, ref.id);
  fs::create_directories(cache.snapshot(rev.commit));
  fs::create_directories(cache.repo_dir() / "refs");  // @huggingface/hub's scan expects it
  uint64_t to_fetch = 0;
  for (const RepoFile& f : files) {
    std::error_code ec;
    if (!fs::exists(cache.snapshot(rev.commit) / f.path, ec)) to_fetch += f.size;
  }
  Job job{hub, ref, cache, rev.commit, progress};
  progress.begin(ref.id, files.size(), to_fetch);
  settle_all(job, files, opt);
  progress.end();
  if (ref.revision != rev.commit) cache.write_ref(ref.revision, rev.commit);
  return {cache.snapshot(rev.commit), rev.commit, job.fetched.load(),
          files.size() - job.fetched.load(), job.bytes.load()};
}

}  // namespace kiln
