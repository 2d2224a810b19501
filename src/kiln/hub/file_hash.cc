#include "kiln/hub/file_hash.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include "kiln/base/error.h"

namespace kiln {

std::string file_digest(const fs::path& path, HashKind kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open to check its digest", path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  const EVP_MD* md = kind == HashKind::kSha256 ? EVP_sha256() : EVP_sha1();
  KILN_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), md, nullptr) == 1);
  if (kind == HashKind::kGitBlobSha1) {
    const std::string header = "blob " + std::to_string(fs::file_size(path)) + '\0';
    EVP_DigestUpdate(ctx.get(), header.data(), header.size());
  }
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) fail("{}: read error while checking its digest", path.string());
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), out, &n);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) {
    hex += kHex[out[i] >> 4];
    hex += kHex[out[i] & 15];
  }
  return hex;
}

const char* hash_kind_name(HashKind kind) {
  return kind == HashKind::kSha256 ? "sha256" : "git blob sha1";
}

}  // namespace kiln
