// Directories written as one, like files are (file.h's write_file_atomic): a reader finds the
// old directory or the whole new one under the name, never a part.
#pragma once

#include <functional>

#include "kiln/base/file.h"

namespace kiln {

// `fill(tmp)` writes the directory's files into a fresh sibling "<dir>.tmp.<pid>", which is
// fsynced and then takes `dir`'s name in one rename (an existing directory `dir` is exchanged
// with it atomically where the filesystem can, then removed). If `fill` throws, the temporary is
// removed, `dir` is untouched and the error passes on.
void write_dir_atomic(const fs::path& dir, const std::function<void(const fs::path& tmp)>& fill);

}  // namespace kiln
