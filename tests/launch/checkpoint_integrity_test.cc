// Checkpoints are verified before they are loaded: every file's XXH3-64 and length in the
// manifest. A bit flip is an error naming the file and both checksums; train.resume=auto skips a
// damaged checkpoint (with a warning naming it and why) for the newest intact one and ends like
// an uninterrupted run; when none is intact it is an error listing each.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/run_kiln.h"
#include "common/run_losses.h"
#include "common/tiny_run.h"
#include "kiln/base/checksum.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

using testing::run_kiln;

// Two workers, checkpoints every 5 steps, saved synchronously (so the newest save point is
// committed when a later step dies).
fs::path make_run(const std::string& name) {
  return testing::write_tiny_run(
      "kiln_integrity", name, 3,
      "optimizer:\n  lr: 3.0e-3\n"
      "train:\n  max_steps: 20\n  micro_batch_size: 2\n  log_every: 20\n"
      "checkpoint:\n  every_steps: 5\n  keep_last: 0\n  background: false\n"
      "failure:\n  max_restarts: 0\n"
      "dist:\n  nproc_per_node: 2\n  timeout_s: 30\n  threads_per_worker: 1\n");
}

testing::CmdResult train(const fs::path& d, const std::string& run, const std::string& args = "",
                         const std::string& env = "") {
  return run_kiln(
      "train " + (d / "recipe.yaml").string() + " output.dir=" + (d / run).string() + " " + args,
      env);
}

void flip_bit(const fs::path& p, size_t at) {
  std::string bytes = read_file(p);
  ASSERT_LT(at, bytes.size()) << p;
  bytes[at] ^= 0x04;
  write_file_atomic(p, bytes);
}

void truncate_to_half(const fs::path& p) { fs::resize_file(p, fs::file_size(p) / 2); }

bool has(const std::string& out, const std::string& what) {
  return out.find(what) != std::string::npos;
}

constexpr const char* kShard1 = "rank-00001-of-00002.safetensors";

// A flipped bit in a shard's data: export (one process) and a resume on two workers (rank 1
// hashes that file; rank 0 reports the same verdict) both stop with the file named, the checksum
// the manifest records and the one the file has.
TEST(CheckpointIntegrity, BitFlipInAShardIsAnErrorNamingTheFileAndBothChecksums) {
  const fs::path d = make_run("bitflip");
  auto r = train(d, "run", "train.max_steps=5");
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path ck = d / "run/checkpoints/step-00000005", shard = ck / kShard1;
  const Json m = read_json_file(ck / "manifest.json");
  EXPECT_EQ(m.at("format_version"), 4);
  ASSERT_EQ(m.at("files").size(), 2u);
  const Json& entry = m.at("files")[1];
  EXPECT_EQ(entry.at("name"), kShard1);
  const FileDigest good = digest_file(shard);
  EXPECT_EQ(entry.at("bytes").get<uint64_t>(), good.bytes);
  EXPECT_EQ(entry.at("xxh3"), xxh3_hex(good.xxh3));
  bool has_config = false;
  for (const auto& f : m.at("other_files")) has_config |= f.at("name") == "config.json";
  EXPECT_TRUE(has_config) << m.dump();

  flip_bit(shard, good.bytes - 1000);
  const std::string bad = xxh3_hex(digest_file(shard).xxh3);
  const std::string want = shard.string() + ": checksum mismatch: the manifest records xxh3 " +
                           entry.at("xxh3").get<std::string>() + ", the file has " + bad;
  auto e = run_kiln("export --checkpoint " + ck.string() + " --out " + (d / "out").string());
  EXPECT_NE(e.code, 0);
  EXPECT_TRUE(has(e.out, "kiln: error: " + want)) << e.out;
  auto t = train(d, "again", "train.max_steps=6 train.resume=" + ck.string());
  EXPECT_NE(t.code, 0);
  EXPECT_TRUE(has(t.out, want)) << t.out;
  EXPECT_FALSE(has(t.out, "resumed from")) << t.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// The newest checkpoint's shard is cut short: train.resume=auto warns, names it and the reason,
// resumes from the one before on both workers, and the run ends bit-identical to an
// uninterrupted one (losses and final weights).
TEST(CheckpointIntegrity, ResumeAutoSkipsATruncatedNewestCheckpointAndEndsBitIdentical) {
  const fs::path d = make_run("truncated");
  auto full = train(d, "full");
  ASSERT_EQ(full.code, 0) << full.out;
  auto crash = train(d, "cut", "", "KILN_FAULT=0:17:exit");
  ASSERT_NE(crash.code, 0) << crash.out;
  const fs::path newest = d / "cut/checkpoints/step-00000015";
  ASSERT_TRUE(fs::exists(newest / "manifest.json")) << crash.out;
  truncate_to_half(newest / kShard1);
  auto resumed = train(d, "cut", "train.resume=auto");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_TRUE(has(resumed.out, "train.resume=auto: skipping damaged checkpoint " + newest.string() +
                                   ": " + (newest / kShard1).string() + ": truncated"))
      << resumed.out;
  EXPECT_TRUE(has(resumed.out,
                  "resumed from " + (d / "cut/checkpoints/step-00000010").string() + " (step 10)"))
      << resumed.out;
  const auto a = testing::run_losses(d / "full"), b = testing::run_losses(d / "cut");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  EXPECT_TRUE(read_file(d / "full/final/model.safetensors") ==
              read_file(d / "cut/final/model.safetensors"));
  // The resumed run saved step 15 again, intact.
  auto e = run_kiln("export --checkpoint " + newest.string() + " --out " + (d / "out").string());
  EXPECT_EQ(e.code, 0) << e.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// Every checkpoint damaged (a flipped bit, a missing shard, an unreadable manifest): no silent
// fresh start but one error listing each and why; nothing is trained.
TEST(CheckpointIntegrity, ResumeAutoWithEveryCheckpointDamagedIsAnErrorListingEach) {
  const fs::path d = make_run("alldamaged");
  auto r = train(d, "run", "train.max_steps=15");
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path ck = d / "run/checkpoints";
  flip_bit(ck / "step-00000005" / kShard1, 4000);
  fs::remove(ck / "step-00000010/rank-00000-of-00002.safetensors");
  write_file_atomic(ck / "step-00000015/manifest.json", "{\"step\": 15, ");
  const auto rows_before = testing::run_losses(d / "run").size();
  auto again = train(d, "run", "train.max_steps=20 train.resume=auto");
  EXPECT_NE(again.code, 0);
  EXPECT_TRUE(has(again.out, "kiln: error: train.resume=auto: no intact checkpoint in " +
                                 ck.string() + ": step-00000015 (" +
                                 (ck / "step-00000015/manifest.json").string()))
      << again.out;
  EXPECT_TRUE(has(again.out, "step-00000010 (" +
                                 (ck / "step-00000010/rank-00000-of-00002.safetensors").string() +
                                 ": missing"))
      << again.out;
  EXPECT_TRUE(has(again.out, "step-00000005 (" + (ck / "step-00000005" / kShard1).string() +
                                 ": checksum mismatch"))
      << again.out;
  EXPECT_TRUE(has(again.out, "train.resume=none")) << again.out;
  EXPECT_FALSE(has(again.out, "resumed from")) << again.out;
  EXPECT_EQ(testing::run_losses(d / "run").size(), rows_before);
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// Another format version is not damage: resume=auto refuses it as it always did, and does not
// fall back past it to an older checkpoint.
TEST(CheckpointIntegrity, AnOlderFormatVersionIsRefusedNotSkipped) {
  const fs::path d = make_run("version");
  auto r = train(d, "run", "train.max_steps=10");
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path ck = d / "run/checkpoints/step-00000010";
  Json m = read_json_file(ck / "manifest.json");
  m["format_version"] = 2;
  write_file_atomic(ck / "manifest.json", m.dump());
  auto again = train(d, "run", "train.max_steps=12 train.resume=auto");
  EXPECT_NE(again.code, 0);
  EXPECT_TRUE(has(again.out, "kiln: error: " + (ck / "manifest.json").string() +
                                 ": unsupported checkpoint format version 2 (this kiln reads "
                                 "versions 3 to 4)"))
      << again.out;
  EXPECT_FALSE(has(again.out, "resumed from")) << again.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A checkpoint of format 3 (rank 0's own position, no data fingerprints) still resumes: unpacked,
// its index of batches is the group's position times the batch of the group, and the run ends
// with the weights of an uninterrupted run. A packed one written by several ranks recorded only
// rank 0's count: refused, naming the format.
void as_format_3(const fs::path& ck, uint64_t index) {
  Json m = read_json_file(ck / "manifest.json");
  m["format_version"] = 3;
  m["sampler"] = {{"epoch", m["sampler"]["epoch"]}, {"index", index}};
  m.erase("data");
  write_file_atomic(ck / "manifest.json", m.dump());
}

TEST(CheckpointIntegrity, AFormat3CheckpointStillResumes) {
  const fs::path d = make_run("format3");
  auto full = train(d, "full");
  ASSERT_EQ(full.code, 0) << full.out;
  auto r = train(d, "run", "train.max_steps=10");
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path ck = d / "run/checkpoints/step-00000010";
  const Json m = read_json_file(ck / "manifest.json");
  // A micro-batch of 2 ranks x 2 rows takes 4 positions of the order: format 3 counted batches.
  const uint64_t position = m["sampler"]["position"].get<uint64_t>();
  ASSERT_EQ(position % 4, 0u) << m.dump();
  as_format_3(ck, position / 4);
  fs::remove_all(d / "run/checkpoints/step-00000005");
  auto again = train(d, "run", "train.resume=auto");
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(has(again.out, "checkpoint format 3 records no data fingerprints")) << again.out;
  EXPECT_TRUE(read_file(d / "full/final/model.safetensors") ==
              read_file(d / "run/final/model.safetensors"));

  auto packed = train(d, "packed", "data.pack=true train.max_steps=5");
  ASSERT_EQ(packed.code, 0) << packed.out;
  const fs::path pk = d / "packed/checkpoints/step-00000005";
  as_format_3(pk, 7);
  auto refused = train(d, "packed", "data.pack=true train.resume=auto");
  EXPECT_NE(refused.code, 0);
  EXPECT_TRUE(has(refused.out, pk.string() + ": checkpoint format 3 recorded a packed run's data "
                                             "position per rank (2 ranks)"))
      << refused.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
