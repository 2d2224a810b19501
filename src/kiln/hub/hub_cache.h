// One model repository in the Hugging Face cache, laid out as huggingface_hub lays it out (its
// file_download.py; @huggingface/hub's cache-management.ts reads the same):
//
//   <cache>/models--ORG--NAME/
//     refs/<REV>                 the commit a branch or tag named, 40 hex, no newline
//     blobs/<ETAG>               each file's bytes once: the LFS sha256, else the git blob id
//     blobs/<ETAG>.incomplete    a download in progress (resumed with a Range request)
//     snapshots/<COMMIT>/<FILE>  relative symlink -> ../../blobs/<ETAG> (deeper for subfolders)
//   <cache>/.locks/models--ORG--NAME/<ETAG>.lock   flock'd while a blob is written (as filelock)
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "kiln/hub/repo_ref.h"

namespace kiln {

namespace fs = std::filesystem;

class HubCache {
 public:
  HubCache(fs::path cache_dir, std::string repo_id);

  const std::string& repo_id() const { return repo_id_; }
  const fs::path& cache_dir() const { return cache_dir_; }
  fs::path repo_dir() const { return cache_dir_ / repo_folder_name(repo_id_); }
  fs::path blob(const std::string& etag) const { return repo_dir() / "blobs" / etag; }
  fs::path incomplete(const std::string& etag) const;
  fs::path snapshot(const std::string& commit) const { return repo_dir() / "snapshots" / commit; }
  fs::path lock_file(const std::string& etag) const;

  // The commit `revision` names in this cache: itself when it is a commit hash, else refs/<REV>'s
  // contents; nullopt when the ref is not there.
  std::optional<std::string> commit_of(const std::string& revision) const;
  // refs/<REV> = commit, written atomically without a newline (as huggingface_hub writes it).
  void write_ref(const std::string& revision, const std::string& commit) const;
  // snapshots/<COMMIT>/<file> -> the blob, by a relative link; replaces an older link.
  void link(const std::string& commit, const std::string& file, const std::string& etag) const;

 private:
  fs::path cache_dir_;
  std::string repo_id_;
};

// The snapshot folder `ref` resolves to in the cache, every link in it checked: nullopt when the
// repository, its ref or its snapshot is not there; an error naming the file when a link
// dangles (a blob removed behind the cache's back).
std::optional<fs::path> cached_snapshot(const fs::path& cache_dir, const RepoRef& ref);

// Throws naming the first file under `snapshot` whose link does not lead to a file.
void check_snapshot_links(const fs::path& snapshot, const std::string& repo_id);

// An exclusive flock on a file, released on destruction: the same lock huggingface_hub's
// filelock takes, so kiln and Python never write one blob at once.
class FileLock {
 public:
  explicit FileLock(const fs::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace kiln
