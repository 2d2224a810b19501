#include "kiln/model_files/base_fingerprint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/base/log.h"
#include "kiln/io/checkpoint_reader.h"

namespace kiln {

namespace {

// The weight files as transformers picks them: model.safetensors, else the index's shards.
std::vector<fs::path> weight_files(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / kSafetensorsSingleFile, ec)) return {dir / kSafetensorsSingleFile};
  const fs::path index = dir / kSafetensorsIndexFile;
  if (!fs::is_regular_file(index, ec)) {
    fail("{}: neither {} nor {} found (the base model's weights)", dir.string(),
         kSafetensorsSingleFile, kSafetensorsIndexFile);
  }
  const Json j = read_json_file(index);
  const auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (!j.is_object() || wm == j.end() || !wm->is_object())
    fail("{}: missing \"weight_map\" object", index.string());
  std::set<std::string> shards;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos)
      fail("{}: weight_map entry of tensor {} is not a file name", index.string(), name);
    shards.insert(shard.get<std::string>());
  }
  std::vector<fs::path> out;
  for (const std::string& s : shards) out.push_back(dir / s);
  return out;
}

// Reads [at, at + n) of `f` into buf (fewer bytes at the end of the file).
size_t read_at(std::ifstream& f, uint64_t at, size_t n, std::vector<char>& buf, const fs::path& p) {
  buf.resize(n);
  f.clear();
  f.seekg(static_cast<std::streamoff>(at));
  f.read(buf.data(), static_cast<std::streamsize>(n));
  if (f.bad()) fail("{}: cannot be read", p.string());
  return static_cast<size_t>(f.gcount());
}

// One file into `h`: name, length, header, the sampled blocks of its data.
uint64_t hash_weight_file(const fs::path& p, Xxh3Stream& h) {
  std::error_code ec;
  const uint64_t size = fs::file_size(p, ec);
  if (ec) fail("{}: cannot be read ({})", p.string(), ec.message());
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: cannot be opened", p.string());
  const std::string name = p.filename().string();
  h.update(name.data(), name.size() + 1);
  h.update(&size, sizeof(size));
  std::vector<char> buf;
  uint64_t header = 0;  // the safetensors header's length, after its 8-byte length
  if (read_at(f, 0, 8, buf, p) == 8) std::memcpy(&header, buf.data(), 8);
  const uint64_t data_begin = std::min(size, 8 + std::min(header, size));
  h.update(buf.data(), read_at(f, 0, static_cast<size_t>(data_begin), buf, p));
  if (size > data_begin) {
    hash_sampled_range(h, p, data_begin, size, kFingerprintBlocks, kFingerprintBlockBytes);
  }
  return size;
}

}  // namespace

FileDigest base_fingerprint(const fs::path& model_dir) {
  Xxh3Stream h;
  uint64_t bytes = 0;
  for (const fs::path& p : weight_files(model_dir)) bytes += hash_weight_file(p, h);
  return {bytes, h.digest().xxh3};
}

std::string fingerprint_text(const FileDigest& d) {
  return fmt::format("{} bytes, xxh3 {}", d.bytes, xxh3_hex(d.xxh3));
}

void check_adapter_base(const std::optional<FileDigest>& recorded, const std::string& adapters,
                        const fs::path& base_dir, bool allow_other, const std::string& allow_flag) {
  if (!recorded) return;
  const FileDigest now = base_fingerprint(base_dir);
  if (now == *recorded) return;
  const std::string what =
      fmt::format("{} was trained on another base than {} (the adapters' base: {}; {}: {})",
                  adapters, base_dir.string(), fingerprint_text(*recorded),
                  base_dir.filename().string(), fingerprint_text(now));
  if (!allow_other) fail("{}; {} applies them anyway", what, allow_flag);
  KILN_LOG_WARN("{}; applying them anyway ({})", what, allow_flag);
}

}  // namespace kiln
