// Files: whole-file reads, read-only memory maps, and atomic writes (temporary name, fsync,
// rename, fsync of the directory) so that a crash never leaves a half-written output in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "kiln/base/checksum.h"

namespace kiln {

namespace fs = std::filesystem;

// Reads a whole file; throws kiln::Error naming the path on failure.
std::string read_file(const fs::path& path);

// A read-only memory map of a whole file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const fs::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const fs::path& path() const { return path_; }
  // Gives the pages wholly inside [p, p + n) (p within the map) back to the kernel: they leave
  // this process's resident set (a later read maps them again from the page cache). Readers
  // call it once done with a range, so reading a large file piece by piece never holds it all.
  void release(const uint8_t* p, size_t n) const;

 private:
  void reset();
  fs::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Writes a file atomically: the data goes to "<path>.tmp.<pid>", is fsynced, then renamed over
// `path`, and the directory is fsynced. On any error the temporary file is removed and the old
// file (if any) is untouched. The bytes written are digested as they go (XXH3-64), so a
// checkpoint records its files' checksums without reading them back.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(fs::path path);
  ~AtomicFileWriter();  // abandons (removes the temporary) unless commit() ran
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Makes the file durable under its name; returns the digest of everything written.
  FileDigest commit();

 private:
  fs::path path_;
  fs::path tmp_;
  int fd_ = -1;
  Xxh3Stream digest_;
};

FileDigest write_file_atomic(const fs::path& path, std::string_view contents);

// fsync a directory so a rename inside it is durable.
void fsync_dir(const fs::path& dir);

}  // namespace kiln
