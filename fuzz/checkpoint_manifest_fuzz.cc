// libFuzzer target for the checkpoint manifest reader (parse_manifest, what read_manifest runs on
// manifest.json's text), against the layout of `kiln init --config tiny`. Any bytes must give a
// ManifestRead, never an exception or a crash. A rejected manifest carries one line naming
// manifest.json and no files. One that reads must keep its promises: every file a plain name
// inside the checkpoint directory, shards a prefix of the files, step and optimizer step count
// in [0, kMaxCheckpointStep]; and what it read, written again as rank 0 writes a manifest
// (manifest_json, manifest_file_entry), must read back the same.
// tests/train also runs this entry point over the seeds and their mutations in the ordinary
// (gcc) suite.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/train/checkpoint_manifest.h"

namespace {

const kiln::fs::path kDir = "/ckpt/step-00000002";

[[noreturn]] void broken(const char* what, const std::string& detail) {
  std::fprintf(stderr, "checkpoint manifest: %s: %s\n", what, detail.c_str());
  std::abort();
}

void check_name(const std::string& name) {
  const kiln::fs::path p(name);
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos || !p.is_relative() ||
      (kDir / p).parent_path() != kDir) {
    broken("a file outside the checkpoint directory", name);
  }
}

void check_same(const kiln::ManifestRead& a, const kiln::ManifestRead& b) {
  if (b.status != kiln::ManifestRead::kOk) broken("its own rewrite does not read", b.error);
  if (a.files.size() != b.files.size() || a.num_shards != b.num_shards) {
    broken("the rewrite lists other files", b.manifest.dump());
  }
  for (size_t i = 0; i < a.files.size(); ++i) {
    if (a.files[i].name != b.files[i].name || a.files[i].digest.bytes != b.files[i].digest.bytes ||
        a.files[i].digest.xxh3 != b.files[i].digest.xxh3) {
      broken("the rewrite changed a file entry", a.files[i].name);
    }
  }
  const kiln::CheckpointState &s = a.state, &t = b.state;
  // The rewrite is in the current format, whatever the input's (a format 3 index reads back as
  // the same number).
  if (s.step != t.step || s.sampler != t.sampler || s.world_size != t.world_size ||
      s.data_files != t.data_files || s.strategy != t.strategy || s.recipe_yaml != t.recipe_yaml ||
      s.metrics != t.metrics || a.optimizer_steps != b.optimizer_steps) {
    broken("the rewrite changed the state", b.manifest.dump());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln::ParamLayout layout(kiln::preset_config("tiny"));
  const std::string text(reinterpret_cast<const char*>(data), size);
  const kiln::ManifestRead r = kiln::parse_manifest(text, kDir, layout);
  if (r.status != kiln::ManifestRead::kOk) {
    if (r.error.empty() || r.error.find('\n') != std::string::npos ||
        r.error.find("manifest.json") == std::string::npos) {
      broken("a rejection that is not one line naming manifest.json", r.error);
    }
    if (!r.files.empty() || r.num_shards != 0) broken("a rejected manifest with files", r.error);
    return 0;
  }
  if (!r.error.empty()) broken("a manifest that reads with an error", r.error);
  if (r.num_shards > r.files.size()) broken("more shards than files", r.manifest.dump());
  for (const auto& f : r.files) check_name(f.name);
  if (r.state.step < 0 || r.state.step > kiln::kMaxCheckpointStep || r.optimizer_steps < 0 ||
      r.optimizer_steps > kiln::kMaxCheckpointStep) {
    broken("a step out of range", r.manifest.dump());
  }

  kiln::Json again = kiln::manifest_json(r.state, layout, r.state.world_size, r.optimizer_steps);
  again["files"] = kiln::Json::array();
  again["other_files"] = kiln::Json::array();
  for (size_t i = 0; i < r.files.size(); ++i) {
    again[i < r.num_shards ? "files" : "other_files"].push_back(
        kiln::manifest_file_entry(r.files[i]));
  }
  check_same(r, kiln::parse_manifest(again.dump(2) + "\n", kDir, layout));
  return 0;
}
