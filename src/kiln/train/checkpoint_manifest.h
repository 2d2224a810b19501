// manifest.json of a trainer checkpoint: what it records and how it is read back. Written last
// by rank 0 (checkpoint.cc); read by every loader (load_checkpoint, CheckpointUnitReader, the
// resume choice) through read_manifest, which sorts what can go wrong into damage (a resume may
// fall back past it) and incompatibility (another format version or another model: never
// skipped, always an error).
//
// Format 4: "sampler" is the group's position in the data order ({"epoch", "position"}, the same
// for any world size), and "data" lists each data.train file with its length and XXH3-64
// ({"name": its path, "bytes", "xxh3"}). Format 3 (read too) recorded rank 0's own index
// ({"epoch", "index"}) and no data. A LoRA run's manifest also holds "base": {"bytes", "xxh3"},
// its base model's fingerprint (model/base_fingerprint.h); a checkpoint without it is not checked.
// Since format 3: "files" (the rank shards) and "other_files" (config.json, tokenizer and
// generation files) list {"name", "bytes", "xxh3"} per file: its length and the XXH3-64 of its
// bytes as 16 hex digits, digested while writing. Every name is a plain file name inside the
// checkpoint directory. "step" and "optimizer_steps" are integers in [0, kMaxCheckpointStep]; the
// sampler's epoch and index and every file's "bytes" are unsigned integers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/checksum.h"
#include "kiln/base/json.h"
#include "kiln/model/layout.h"
#include "kiln/train/checkpoint.h"

namespace kiln {

// 2: a layer unit holds wq, wk, wv, then bq, bk, bv (1 interleaved each weight with its bias).
// 3: every file's length and XXH3-64 in "files" and "other_files".
// 4: the data position in the group's order (any world size resumes it) and the data files'
//    digests.
inline constexpr int kCheckpointFormatVersion = 4;
// The oldest format this kiln still reads.
inline constexpr int kOldestCheckpointFormat = 3;

// The largest step (and optimizer step count) a manifest may record: 2^53, exact as a double, far
// beyond any run, and far enough from INT64_MAX that the trainer's step arithmetic cannot overflow.
inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 53;

struct ManifestFile {
  std::string name;  // a file of the checkpoint directory
  FileDigest digest;
};

Json manifest_file_entry(const ManifestFile& f);

// A digest as kDigestDoubles doubles {bytes, high and low 32 bits of the checksum}, each exact,
// so that it travels through a (max) all-reduce from the one rank that has it.
inline constexpr size_t kDigestDoubles = 3;
void digest_to_doubles(const FileDigest& d, double* out);
FileDigest digest_from_doubles(const double* in);

struct ManifestRead {
  enum Status { kOk, kDamaged, kIncompatible };
  Status status = kOk;
  std::string error;  // one line naming manifest.json, when status != kOk
  Json manifest;
  std::vector<ManifestFile> files;  // "files" (the shards) then "other_files"
  size_t num_shards = 0;            // files[0, num_shards) are the shards
  CheckpointState state;            // step, sampler, strategy, recipe, metrics
  int64_t optimizer_steps = 0;
};

// manifest.json's fields but "files" and "other_files", as rank 0 writes them for `state`.
Json manifest_json(const CheckpointState& state, const ParamLayout& layout, int world_size,
                   int64_t optimizer_steps);

// Reads and checks dir/manifest.json against `layout`; never throws for what the file holds.
ManifestRead read_manifest(const fs::path& dir, const ParamLayout& layout);
// The same for manifest text already read (errors still name dir/manifest.json).
ManifestRead parse_manifest(std::string_view text, const fs::path& dir, const ParamLayout& layout);

}  // namespace kiln
