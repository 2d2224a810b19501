#include "kiln/train/checkpoint_verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "kiln/base/error.h"
#include "kiln/base/log.h"

namespace kiln {

namespace {

// One file's verdict as kVerdictSize doubles {code, the file's digest}, all-reduced (max) from
// the one rank that checked it.
enum FileCode {
  kFileOk = 0,
  kFileMissing,
  kFileNotRegular,
  kFileWrongSize,
  kFileMismatch,
  kFileUnreadable
};
constexpr size_t kVerdictSize = 1 + kDigestDoubles;

void put_verdict(double* out, FileCode code, const FileDigest& actual) {
  out[0] = static_cast<double>(code);
  digest_to_doubles(actual, out + 1);
}

// Checks one file on this rank: the cheap checks first, the checksum last.
void check_file(const fs::path& dir, const ManifestFile& f, double* out) {
  const fs::path path = dir / f.name;
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return put_verdict(out, kFileMissing, {});
  if (!fs::is_regular_file(st)) return put_verdict(out, kFileNotRegular, {});
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return put_verdict(out, kFileUnreadable, {});
  if (size != f.digest.bytes) return put_verdict(out, kFileWrongSize, {size, 0});
  try {
    const FileDigest d = digest_file(path);
    put_verdict(out, d == f.digest ? kFileOk : (d.bytes != size ? kFileWrongSize : kFileMismatch),
                d);
  } catch (const std::exception& e) {
    KILN_LOG_WARN("{}", e.what());
    put_verdict(out, kFileUnreadable, {});
  }
}

std::string describe(const fs::path& dir, const ManifestFile& f, const double* v, int checker) {
  const std::string path = (dir / f.name).string();
  const FileDigest actual = digest_from_doubles(v + 1);
  const uint64_t bytes = actual.bytes;
  switch (static_cast<int>(v[0])) {
    case kFileMissing:
      return fmt::format("{}: missing (the manifest lists it)", path);
    case kFileNotRegular:
      return fmt::format("{}: not a regular file (a link or a directory is never part of one)",
                         path);
    case kFileWrongSize:
      if (bytes < f.digest.bytes) {
        return fmt::format("{}: truncated: {} of the {} bytes the manifest records", path, bytes,
                           f.digest.bytes);
      }
      return fmt::format("{}: {} bytes, the manifest records {}", path, bytes, f.digest.bytes);
    case kFileMismatch:
      return fmt::format("{}: checksum mismatch: the manifest records xxh3 {}, the file has {}",
                         path, xxh3_hex(f.digest.xxh3), xxh3_hex(actual.xxh3));
    default:
      return fmt::format("{}: cannot be read (rank {} logged why)", path, checker);
  }
}

// Every rank's manifest verdict, agreed: {worst status, file count seen by all}.
ManifestRead::Status agree_on_manifest(CheckpointCheck& c, Communicator& world) {
  const ManifestRead& m = c.manifest;
  const double n = m.status == ManifestRead::kOk ? static_cast<double>(m.files.size()) : 0;
  double v[3] = {static_cast<double>(m.status), n, -n};
  world.all_reduce(v, size_t{3}, ReduceOp::kMax);
  const auto worst = static_cast<ManifestRead::Status>(static_cast<int>(v[0]));
  const std::string mine = m.status == worst
                               ? m.error
                               : fmt::format(
                                     "{}/manifest.json: another rank could not use it (its log "
                                     "says why)",
                                     c.dir.string());
  if (worst == ManifestRead::kIncompatible) fail("{}", mine);
  if (worst == ManifestRead::kDamaged) c.problems.push_back(mine);
  if (worst == ManifestRead::kOk && v[1] != -v[2]) {
    c.problems.push_back(
        fmt::format("{}/manifest.json: the ranks read different file lists", c.dir.string()));
  }
  return worst;
}

// Step directories under root ("step-" and digits), newest first.
std::vector<std::pair<int64_t, fs::path>> step_dirs(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const std::string digits = name.starts_with("step-") ? name.substr(5) : "";
    if (!e.is_directory() || digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    out.emplace_back(std::stoll(digits), e.path());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

}  // namespace

std::string CheckpointCheck::summary() const {
  std::string s;
  for (const auto& p : problems) s += (s.empty() ? "" : "; ") + p;
  return s;
}

CheckpointCheck check_checkpoint(const fs::path& dir, const ParamLayout& layout,
                                 Communicator& world) {
  CheckpointCheck c{dir, read_manifest(dir, layout), {}};
  if (agree_on_manifest(c, world) != ManifestRead::kOk || !c.intact()) return c;
  const auto& files = c.manifest.files;
  const int rank = world.rank(), W = world.world_size();
  std::vector<double> v(kVerdictSize * files.size(), 0.0);
  for (size_t k = rank; k < files.size(); k += W) check_file(dir, files[k], &v[kVerdictSize * k]);
  world.all_reduce(v.data(), v.size(), ReduceOp::kMax);
  for (size_t k = 0; k < files.size(); ++k) {
    if (v[kVerdictSize * k] != 0) {  // kFileOk
      c.problems.push_back(describe(dir, files[k], &v[kVerdictSize * k], static_cast<int>(k) % W));
    }
  }
  return c;
}

std::optional<CheckpointCheck> newest_intact_checkpoint(const fs::path& root,
                                                        const ParamLayout& layout,
                                                        Communicator& world) {
  const auto dirs = step_dirs(root);
  std::vector<std::string> skipped;
  for (size_t i = 0;; ++i) {
    // Every rank must look at the same candidate: a shared filesystem shows them the same list.
    const double step = i < dirs.size() ? static_cast<double>(dirs[i].first) : -1;
    double v[2] = {step, -step};
    world.all_reduce(v, size_t{2}, ReduceOp::kMax);
    if (v[0] != -v[1]) fail("{}: the ranks see different checkpoints", root.string());
    if (step < 0) break;
    CheckpointCheck c = check_checkpoint(dirs[i].second, layout, world);
    if (c.intact()) return c;
    if (world.rank() == 0) {
      KILN_LOG_WARN("train.resume=auto: skipping damaged checkpoint {}: {}",
                    dirs[i].second.string(), c.summary());
    }
    skipped.push_back(fmt::format("{} ({})", dirs[i].second.filename().string(), c.summary()));
  }
  if (skipped.empty()) return std::nullopt;
  std::string list;
  for (const auto& s : skipped) list += (list.empty() ? "" : "; ") + s;
  fail(
      "train.resume=auto: no intact checkpoint in {}: {}. Move the damaged ones away, or set "
      "train.resume=none to start again from model.path",
      root.string(), list);
}

}  // namespace kiln
