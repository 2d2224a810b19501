#include "kiln/hub/hub_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "kiln/base/error.h"
#include "kiln/base/file.h"

namespace kiln {

HubCache::HubCache(fs::path cache_dir, std::string repo_id)
    : cache_dir_(std::move(cache_dir)), repo_id_(std::move(repo_id)) {}

fs::path HubCache::incomplete(const std::string& etag) const {
  return repo_dir() / "blobs" / (etag + ".incomplete");
}

fs::path HubCache::lock_file(const std::string& etag) const {
  return cache_dir_ / ".locks" / repo_folder_name(repo_id_) / (etag + ".lock");
}

std::optional<std::string> HubCache::commit_of(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  const fs::path ref = repo_dir() / "refs" / revision;
  std::error_code ec;
  if (!fs::is_regular_file(ref, ec)) return std::nullopt;
  std::string commit = read_file(ref);
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) {
    commit.pop_back();
  }
  if (!is_commit_hash(commit)) {
    fail("{}: holds '{}', not a commit hash (a damaged cache entry)", ref.string(), commit);
  }
  return commit;
}

void HubCache::write_ref(const std::string& revision, const std::string& commit) const {
  const fs::path ref = repo_dir() / "refs" / revision;
  fs::create_directories(ref.parent_path());
  write_file_atomic(ref, commit);
}

void HubCache::link(const std::string& commit, const std::string& file,
                    const std::string& etag) const {
  const fs::path pointer = snapshot(commit) / file;
  fs::create_directories(pointer.parent_path());
  const fs::path target = fs::relative(blob(etag), pointer.parent_path());
  std::error_code ec;
  fs::remove(pointer, ec);
  fs::create_symlink(target, pointer, ec);
  if (ec) fail("{}: cannot link to {}: {}", pointer.string(), target.string(), ec.message());
}

void check_snapshot_links(const fs::path& snapshot, const std::string& repo_id) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(snapshot, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_symlink(ec)) continue;
    if (!fs::exists(it->path(), ec)) {
      fail("{}: {} in the cache is a dangling link ({} -> {}); remove {} and download it again",
           repo_id, fs::relative(it->path(), snapshot).string(), it->path().string(),
           fs::read_symlink(it->path(), ec).string(), snapshot.string());
    }
  }
}

std::optional<fs::path> cached_snapshot(const fs::path& cache_dir, const RepoRef& ref) {
  const HubCache cache(cache_dir, ref.id);
  const std::optional<std::string> commit = cache.commit_of(ref.revision);
  if (!commit) return std::nullopt;
  const fs::path snap = cache.snapshot(*commit);
  std::error_code ec;
  if (!fs::is_directory(snap, ec)) return std::nullopt;
  check_snapshot_links(snap, ref.id);
  return snap;
}

FileLock::FileLock(const fs::path& path) {
  fs::create_directories(path.parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot open the lock: {}", path.string(), std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int e = errno;
      ::close(fd_);
      fail("{}: cannot lock: {}", path.string(), std::strerror(e));
    }
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace kiln
