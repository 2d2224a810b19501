// Which base model an adapter was trained on. A LoRA run records its base's fingerprint in every
// checkpoint's manifest ("base") and in the adapter directories kiln writes (kKilnBaseFile beside
// adapter_config.json, a file PEFT does not read); resuming, evaluating, decoding or merging the
// adapters onto weights with another fingerprint is refused, naming both.
//
// The fingerprint is cheap by design, since a 7B base is 15 GB: XXH3-64 over, per weight file
// (model.safetensors, or each shard the index names, in name order), its name, its length, its
// safetensors header (every tensor's name, dtype, shape and offsets) and kFingerprintBlocks blocks
// of kFingerprintBlockBytes spread evenly over its data (the first and the last included). Another
// checkpoint of the same architecture (a different seed or fine-tune: every weight moves) differs
// in every block; a change confined to bytes between the blocks goes unseen. `bytes` is the
// weight files' total length.
#pragma once

#include <optional>
#include <string>

#include "kiln/base/checksum.h"

namespace kiln {

inline constexpr int kFingerprintBlocks = 64;
inline constexpr size_t kFingerprintBlockBytes = 4096;

// The fingerprint of the Hugging Face model directory `model_dir`'s weights. Error naming the
// directory when it has neither model.safetensors nor model.safetensors.index.json, or a file
// cannot be read.
FileDigest base_fingerprint(const fs::path& model_dir);

// "15013298176 bytes, xxh3 0123456789abcdef": a fingerprint in an error message.
std::string fingerprint_text(const FileDigest& d);

// Adapters recorded as trained on `recorded` (nullopt: nothing recorded, nothing checked) are
// applied to the base `base_dir`. When its fingerprint differs: with `allow_other` a warning,
// else kiln::Error in one line naming `adapters` (what holds them), both fingerprints and
// `allow_flag` (the option that applies them anyway).
void check_adapter_base(const std::optional<FileDigest>& recorded, const std::string& adapters,
                        const fs::path& base_dir, bool allow_other, const std::string& allow_flag);

}  // namespace kiln
