// The digests the hub's metadata gives for a file, computed over a file on disk (OpenSSL):
// an LFS file's sha256, and a file kept in git its blob id, SHA-1 over "blob <size>\0" + bytes.
#pragma once

#include <filesystem>
#include <string>

namespace kiln {

namespace fs = std::filesystem;

enum class HashKind { kSha256, kGitBlobSha1 };

// Lowercase hex digest of the whole file at `path`.
std::string file_digest(const fs::path& path, HashKind kind);

const char* hash_kind_name(HashKind kind);  // "sha256", "git blob sha1"

}  // namespace kiln
