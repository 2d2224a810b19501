#include "kiln/base/atomic_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kiln/base/error.h"

namespace kiln {

namespace {

// Puts the directory `tmp` in `dir`'s place: an exchange when `dir` exists (one atomic step where
// the filesystem has RENAME_EXCHANGE, else two renames), the old one then removed.
void publish_dir(const fs::path& tmp, const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0)
      fail("{}: cannot rename {} to it: {}", dir.string(), tmp.string(), std::strerror(errno));
    return;
  }
  if (!fs::is_directory(dir, ec)) fail("{}: exists and is not a directory", dir.string());
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    fs::path aside = dir;
    aside += fmt::format(".old.{}", ::getpid());
    fs::remove_all(aside, ec);
    if (::rename(dir.c_str(), aside.c_str()) != 0 || ::rename(tmp.c_str(), dir.c_str()) != 0)
      fail("{}: cannot replace it with {}: {}", dir.string(), tmp.string(), std::strerror(errno));
    fs::remove_all(aside, ec);
    return;
  }
  fs::remove_all(tmp, ec);  // the old directory, now under the temporary name
}

}  // namespace

void write_dir_atomic(const fs::path& dir_in,
                      const std::function<void(const fs::path& tmp)>& fill) {
  const fs::path dir = dir_in.filename().empty() ? dir_in.parent_path() : dir_in;  // "out/"
  fs::path tmp = dir;
  tmp += fmt::format(".tmp.{}", ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (fs::create_directories(tmp, ec); ec)
    fail("{}: cannot create {}: {}", dir.string(), tmp.string(), ec.message());
  try {
    fill(tmp);
    fsync_dir(tmp);
    publish_dir(tmp, dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fsync_dir(dir.has_parent_path() ? dir.parent_path() : fs::path("."));
}

}  // namespace kiln
