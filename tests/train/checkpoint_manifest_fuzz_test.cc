// Runs the libFuzzer entry point of the checkpoint manifest reader
// (fuzz/checkpoint_manifest_fuzz.cc, linked in) in the ordinary test suite: over the seed corpus,
// every truncation of each seed, seeded byte edits, and JSON edits (a value replaced by another
// type, an extreme number or a name reaching outside the directory; a key dropped). The entry
// point aborts when a manifest that reads breaks a promise or does not survive its rewrite;
// anything escaping is a failure here. The invalid seeds must each be turned down for their flaw.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/fuzz_driver.h"
#include "common/fuzz_json.h"
#include "kiln/base/json.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/train/checkpoint_manifest.h"

namespace kiln {
namespace {

using testing::fuzz_json_edit;
using testing::fuzz_json_nodes;
using testing::fuzz_mutate;
using testing::fuzz_seeds;
using testing::fuzz_truncations;
using testing::FuzzTally;
using testing::run_fuzz_input;

const fs::path kSeeds = fs::path(KILN_SOURCE_DIR) / "fuzz/corpus/checkpoint_manifest";
const fs::path kDir = "/ckpt/step-00000002";

const ParamLayout& tiny_layout() {
  static const ParamLayout layout(preset_config("tiny"));
  return layout;
}

bool loads(const std::string& text) {
  return parse_manifest(text, kDir, tiny_layout()).status == ManifestRead::kOk;
}

void run_one(const std::string& input, const std::string& label, FuzzTally& tally) {
  run_fuzz_input(input, label, &tally, loads);
}

TEST(CheckpointManifestFuzz, EachInvalidSeedIsRejectedForItsFlaw) {
  const std::map<std::string, std::pair<ManifestRead::Status, std::string>> expected = {
      {"bad_version.json", {ManifestRead::kIncompatible, "format version 2"}},
      {"bad_units.json", {ManifestRead::kIncompatible, "has 3 units"}},
      {"bad_dotdot_name.json", {ManifestRead::kDamaged, "not a file name inside"}},
      {"bad_absolute_name.json", {ManifestRead::kDamaged, "not a file name inside"}},
      {"bad_negative_bytes.json", {ManifestRead::kDamaged, "bytes is -1"}},
      {"bad_float_step.json", {ManifestRead::kDamaged, "step is 1e+300"}},
      {"bad_short_xxh3.json", {ManifestRead::kDamaged, "xxh3 is not 16 hex digits"}},
      // Found by checkpoint_manifest_fuzz: a name with a newline (and a short xxh3).
      {"bad_name_with_newline.json", {ManifestRead::kDamaged, "not a file name inside"}},
      {"bad_data_xxh3.json", {ManifestRead::kDamaged, "data entry"}},
  };
  int valid = 0;
  for (const auto& e : fs::directory_iterator(kSeeds)) {
    const std::string name = e.path().filename().string();
    const ManifestRead r = parse_manifest(read_file(e.path()), kDir, tiny_layout());
    const auto it = expected.find(name);
    if (it == expected.end()) {
      EXPECT_EQ(r.status, ManifestRead::kOk) << name << ": " << r.error;
      ++valid;
      continue;
    }
    EXPECT_EQ(r.status, it->second.first) << name << ": " << r.error;
    EXPECT_NE(r.error.find(it->second.second), std::string::npos) << name << ": " << r.error;
    EXPECT_NE(r.error.find("/ckpt/step-00000002/manifest.json"), std::string::npos) << r.error;
  }
  EXPECT_GE(valid, 3);
}

TEST(CheckpointManifestFuzz, TheWriterWritesWhatTheReaderReads) {
  CheckpointState st;
  st.step = 7;
  st.sampler = {2, 40};
  st.data_files = {{"/data/a.jsonl", {123, 0x1234}}, {"/data/b.jsonl", {5, ~uint64_t{0}}}};
  st.strategy = "full_shard";
  st.recipe_yaml = "train:\n  max_steps: 7\n";
  st.metrics = {{"loss", 1.25}};
  Json m = manifest_json(st, tiny_layout(), 2, 14);
  m["files"] = {manifest_file_entry({"rank-00000-of-00002.safetensors", {10, 0xabcdef}})};
  m["other_files"] = {manifest_file_entry({"config.json", {3, ~uint64_t{0}}})};
  const ManifestRead r = parse_manifest(m.dump(2), kDir, tiny_layout());
  ASSERT_EQ(r.status, ManifestRead::kOk) << r.error;
  EXPECT_EQ(r.state.step, 7);
  EXPECT_EQ(r.state.sampler.epoch, 2u);
  EXPECT_EQ(r.state.sampler.position, 40u);
  EXPECT_EQ(r.state.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(r.state.world_size, 2);
  EXPECT_EQ(r.state.data_files, st.data_files);
  EXPECT_EQ(r.state.strategy, "full_shard");
  EXPECT_EQ(r.state.recipe_yaml, st.recipe_yaml);
  EXPECT_EQ(r.state.metrics, st.metrics);
  EXPECT_EQ(r.optimizer_steps, 14);
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.num_shards, 1u);
  EXPECT_EQ(r.files[0].digest.xxh3, 0xabcdefu);
  EXPECT_EQ(r.files[1].digest.xxh3, ~uint64_t{0});
  FuzzTally tally;
  run_one(m.dump(2), "written", tally);
  EXPECT_EQ(tally.loaded, 1);
}

TEST(CheckpointManifestFuzz, SeedsAndTheirTruncations) {
  FuzzTally tally;
  const auto all = fuzz_seeds(kSeeds);
  ASSERT_GE(all.size(), 10u);
  for (const std::string& s : all) {
    for (const std::string& t : fuzz_truncations(s)) run_one(t, "truncated", tally);
  }
  EXPECT_EQ(tally.loaded, 8);  // the four valid seeds, whole and with their newline cut
}

TEST(CheckpointManifestFuzz, ByteEdits) {
  std::mt19937_64 rng(3);
  FuzzTally tally;
  for (const std::string& s : fuzz_seeds(kSeeds)) {
    for (int i = 0; i < 1500; ++i)
      run_one(fuzz_mutate(s, rng, "{}[]\",:.-/0123456789e \\"), "byte edit", tally);
  }
  EXPECT_GT(tally.loaded, 100);  // edits inside the recipe text, metrics or names keep it valid
  EXPECT_GT(tally.rejected, 1000);
}

TEST(CheckpointManifestFuzz, JsonEdits) {
  const Json replacements = parse_json(R"([null, true, false, 0, -1, 1, 2, 3, 0.5, 1e300, -1e300,
      9007199254740992, 9007199254740993, 9223372036854775807, 18446744073709551615,
      -9223372036854775808, 65536, 46336, "", ".", "..", "/", "../x", "/etc/passwd", "a/b",
      "rank-00000-of-00001.safetensors", "x\u0000y", "fa4f803783f194fa", "FA4F803783F194FA",
      "fa4f803783f194f", "0x4f803783f194fa", [], {}, [{}], {"name": "x"}, [1, 2, 3, 4],
      {"epoch": 0, "index": 0}, [[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]])",
                                       "replacements");
  std::mt19937_64 rng(4);
  FuzzTally tally;
  for (const std::string& seed : fuzz_seeds(kSeeds)) {
    const Json doc = parse_json(seed, "seed");
    std::vector<Json::json_pointer> nodes;
    fuzz_json_nodes(doc, Json::json_pointer(), nodes);
    for (int round = 0; round < 600; ++round) {
      run_one(fuzz_json_edit(doc, nodes, replacements, rng).dump(), "json edit", tally);
    }
  }
  EXPECT_GT(tally.loaded, 200);
  EXPECT_GT(tally.rejected, 2000);
}

}  // namespace
}  // namespace kiln
