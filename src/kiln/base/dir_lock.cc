#include "kiln/base/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "kiln/base/error.h"
#include "kiln/base/log.h"

namespace kiln {

namespace {

// The pid the holder wrote into the lock file ("" when unreadable).
std::string holder_of(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

DirLock::DirLock(const fs::path& dir, const std::string& key) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{} {}: cannot create the directory: {}", key, dir.string(), ec.message());
  const fs::path path = lock_path(dir);
  // No O_CLOEXEC: spawned workers inherit the lock (see the header).
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);  // NOLINT(android-cloexec-open)
  if (fd_ < 0) fail("{} {}: cannot open {}: {}", key, dir.string(), path.string(), strerror(errno));
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? holder_of(fd_) : "";
    if (err != EWOULDBLOCK) {
      // A filesystem without flock (Lustre mounted without -o flock, some NFS setups): the run
      // goes on, unguarded, and says so.
      KILN_LOG_WARN("{} {}: cannot lock {} ({}): a second run into it would not be refused", key,
                    dir.string(), path.string(), strerror(err));
      return;
    }
    ::close(fd_);
    fd_ = -1;
    fail("{} {} is in use by another kiln run{} (lock {}); wait for it to end or choose another {}",
         key, dir.string(), holder.empty() ? "" : " (pid " + holder + ")", path.string(), key);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The pid is only for the message a second run prints; the lock holds without it.
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kiln
