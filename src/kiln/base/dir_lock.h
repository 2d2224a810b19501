// An exclusive lock on a directory for one run: flock(2) on <dir>/.kiln.lock, held for the
// object's life, so two kiln runs never write one output directory at the same time. The lock
// belongs to the open file, not the process: it goes away when the last process holding the
// descriptor exits, however it exits (kill -9 included), so a stale lock file never blocks the
// next run. The descriptor is inherited across fork and exec on purpose: workers spawned by the
// lock's owner keep the directory locked until the last of them is gone.
#pragma once

#include "kiln/base/file.h"

namespace kiln {

class DirLock {
 public:
  // Creates `dir` if needed and locks it; throws kiln::Error naming `key` (the setting that chose
  // the directory, e.g. "output.dir"), the directory and the holder's pid when another process
  // holds the lock. Where the filesystem has no flock (ENOLCK, ENOSYS: Lustre without -o flock)
  // it warns and holds nothing.
  DirLock(const fs::path& dir, const std::string& key);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  static fs::path lock_path(const fs::path& dir) { return dir / ".kiln.lock"; }

 private:
  int fd_ = -1;
};

}  // namespace kiln
