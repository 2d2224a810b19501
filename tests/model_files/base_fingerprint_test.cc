// The base fingerprint: the same for a copy, different for other weights of the same shapes (any
// sampled block, the header), the index's shards in name order; a directory without weights is
// an error naming it; check_adapter_base refuses another base in one line naming both.
#include "kiln/model_files/base_fingerprint.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/error_of.h"
#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/io/safetensors.h"

namespace kiln {
namespace {

using testing::error_of;

// dir/<file> holding tensors "a" (rows, 1000) and "b" (7), value i * 0.5 + shift at element i.
void write_weights(const fs::path& dir, const std::string& file, int rows, float shift) {
  fs::create_directories(dir);
  std::vector<float> a(static_cast<size_t>(rows) * 1000), b(7);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f + shift;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) + shift;
  const std::vector<TensorToWrite> t = {{"a", {rows, 1000}, a.data()}, {"b", {7}, b.data()}};
  write_safetensors(dir / file, t, DType::F32);
}

class BaseFingerprint : public ::testing::Test {
 protected:
  testing::TempDir tmp_{"kiln_fingerprint"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(BaseFingerprint, FollowsTheWeights) {
  write_weights(dir_ / "m", "model.safetensors", 300, 0);
  const FileDigest f = base_fingerprint(dir_ / "m");
  EXPECT_EQ(f.bytes, fs::file_size(dir_ / "m/model.safetensors"));
  fs::copy(dir_ / "m", dir_ / "copy");
  EXPECT_EQ(base_fingerprint(dir_ / "copy"), f);
  write_weights(dir_ / "shifted", "model.safetensors", 300, 1);  // same shapes, other values
  EXPECT_NE(base_fingerprint(dir_ / "shifted"), f);
  write_weights(dir_ / "taller", "model.safetensors", 301, 0);  // another header and length
  EXPECT_NE(base_fingerprint(dir_ / "taller"), f);
  // One changed byte in the last block (the last tensor's) and in the first data byte.
  for (const uint64_t from_end : {uint64_t{1}, fs::file_size(dir_ / "m/model.safetensors") - 300}) {
    fs::remove_all(dir_ / "edited");
    fs::copy(dir_ / "m", dir_ / "edited");
    std::string bytes = read_file(dir_ / "edited/model.safetensors");
    bytes[bytes.size() - from_end] ^= 1;
    write_file_atomic(dir_ / "edited/model.safetensors", bytes);
    EXPECT_NE(base_fingerprint(dir_ / "edited"), f) << from_end;
  }
}

TEST_F(BaseFingerprint, ShardedDirectoriesAndErrors) {
  write_weights(dir_ / "s", "model-00001-of-00002.safetensors", 20, 0);
  write_weights(dir_ / "s", "model-00002-of-00002.safetensors", 20, 3);
  write_file_atomic(dir_ / "s/model.safetensors.index.json",
                    R"({"weight_map": {"a": "model-00002-of-00002.safetensors",
                                       "b": "model-00001-of-00002.safetensors"}})");
  const FileDigest f = base_fingerprint(dir_ / "s");
  EXPECT_EQ(f.bytes, fs::file_size(dir_ / "s/model-00001-of-00002.safetensors") +
                         fs::file_size(dir_ / "s/model-00002-of-00002.safetensors"));
  fs::copy(dir_ / "s", dir_ / "s2");
  EXPECT_EQ(base_fingerprint(dir_ / "s2"), f);
  fs::create_directories(dir_ / "empty");
  EXPECT_NE(error_of([&] {
              base_fingerprint(dir_ / "empty");
            }).find("empty: neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
}

TEST_F(BaseFingerprint, AnotherBaseIsRefusedUnlessAllowed) {
  write_weights(dir_ / "m", "model.safetensors", 30, 0);
  const FileDigest f = base_fingerprint(dir_ / "m");
  EXPECT_NO_THROW(check_adapter_base(f, "A", dir_ / "m", false, "--allow"));
  EXPECT_NO_THROW(check_adapter_base(std::nullopt, "A", dir_ / "m", false, "--allow"));
  const FileDigest other{f.bytes, f.xxh3 ^ 1};
  const std::string msg =
      error_of([&] { check_adapter_base(other, "A", dir_ / "m", false, "--allow"); });
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_NE(msg.find("A was trained on another base than " + (dir_ / "m").string()),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(xxh3_hex(f.xxh3)), std::string::npos) << msg;
  EXPECT_NE(msg.find(xxh3_hex(other.xxh3)), std::string::npos) << msg;
  EXPECT_NE(msg.find("--allow applies them anyway"), std::string::npos) << msg;
  EXPECT_NO_THROW(check_adapter_base(other, "A", dir_ / "m", true, "--allow"));
}

}  // namespace
}  // namespace kiln
