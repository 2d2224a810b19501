// Hugging Face checkpoint directories: single file and sharded round trips, index format, and
// the errors a broken directory must produce.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "io_test_util.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"
#include "kiln/io/checkpoint_writer.h"

namespace kiln {
namespace {

using test::expect_error;
using test::temp_dir;

// Five f32 tensors: a (2, 2) = 16 B, b (4) = 16 B, c (4, 4) = 64 B, d (2, 2) = 16 B, e (2) = 8 B.
struct Model {
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;

  Model() {
    const std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
        {"a", {2, 2}}, {"b", {4}}, {"c", {4, 4}}, {"d", {2, 2}}, {"e", {2}}};
    data.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto n = std::accumulate(specs[i].second.begin(), specs[i].second.end(), int64_t{1},
                                     std::multiplies<>());
      for (int64_t j = 0; j < n; ++j) data[i].push_back(static_cast<float>(i) + 0.25f * j);
      tensors.push_back({specs[i].first, specs[i].second, data[i].data()});
    }
  }
};

void expect_reads_back(const CheckpointReader& r, const Model& m) {
  ASSERT_EQ(r.names(), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorToWrite& t = m.tensors[i];
    EXPECT_TRUE(r.contains(t.name));
    EXPECT_EQ(r.info(t.name).shape, t.shape);
    EXPECT_EQ(r.info(t.name).dtype, DType::F32);
    std::vector<float> got(m.data[i].size());
    r.read_f32(t.name, t.shape, got.data());
    EXPECT_EQ(got, m.data[i]) << t.name;
  }
}

TEST(Checkpoint, SingleFileWhenEverythingFits) {
  const fs::path dir = temp_dir() / "model";
  const Model m;
  write_checkpoint_dir(dir, m.tensors, DType::F32, 1000);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_EQ(SafetensorsFile(dir / "model.safetensors").metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}}));

  const CheckpointReader r(dir);
  expect_reads_back(r, m);
  EXPECT_EQ(r.file_of("c"), (dir / "model.safetensors").string());
  // A direct path to the file works too.
  expect_reads_back(CheckpointReader(dir / "model.safetensors"), m);
}

TEST(Checkpoint, ShardsAsHuggingFaceDoes) {
  const fs::path dir = temp_dir();
  const Model m;
  // Limit 40 B: c (64 B) is alone, then [a, b] (32 B), then [d, e] (24 B).
  write_checkpoint_dir(dir, m.tensors, DType::F32, 40);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  const std::string s1 = "model-00001-of-00003.safetensors";
  const std::string s2 = "model-00002-of-00003.safetensors";
  const std::string s3 = "model-00003-of-00003.safetensors";
  for (const auto& s : {s1, s2, s3}) EXPECT_TRUE(fs::exists(dir / s)) << s;
  // Byte for byte what json.dumps(index, indent=2, sort_keys=True) + "\n" gives.
  EXPECT_EQ(read_file(dir / "model.safetensors.index.json"),
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_size\": 120\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"a\": \"model-00002-of-00003.safetensors\",\n"
            "    \"b\": \"model-00002-of-00003.safetensors\",\n"
            "    \"c\": \"model-00001-of-00003.safetensors\",\n"
            "    \"d\": \"model-00003-of-00003.safetensors\",\n"
            "    \"e\": \"model-00003-of-00003.safetensors\"\n"
            "  }\n"
            "}\n");
  EXPECT_EQ(SafetensorsFile(dir / s1).metadata().at("format"), "pt");

  const CheckpointReader r(dir);
  expect_reads_back(r, m);
  EXPECT_EQ(r.file_of("a"), (dir / s2).string());
  EXPECT_EQ(r.file_of("c"), (dir / s1).string());
  EXPECT_EQ(r.file_of("e"), (dir / s3).string());
  expect_reads_back(CheckpointReader(dir / "model.safetensors.index.json"), m);
}

TEST(Checkpoint, ShardFileNames) {
  EXPECT_EQ(shard_file_name(0, 2), "model-00001-of-00002.safetensors");
  EXPECT_EQ(shard_file_name(11, 12), "model-00012-of-00012.safetensors");
}

TEST(Checkpoint, ResavingReplacesTheOtherLayout) {
  const fs::path dir = temp_dir();
  const Model m;
  write_checkpoint_dir(dir, m.tensors, DType::F32, 40);   // 3 shards
  write_checkpoint_dir(dir, m.tensors, DType::F32, 100);  // 2 shards: [a, b, c], [d, e]
  EXPECT_FALSE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model-00002-of-00002.safetensors"));
  expect_reads_back(CheckpointReader(dir), m);

  write_checkpoint_dir(dir, m.tensors, DType::BF16, kDefaultMaxShardBytes);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "model-00001-of-00002.safetensors"));
  EXPECT_EQ(CheckpointReader(dir).info("a").dtype, DType::BF16);

  write_checkpoint_dir(dir, m.tensors, DType::F32, 40);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));  // would shadow the index
  expect_reads_back(CheckpointReader(dir), m);
}

TEST(Checkpoint, ReadsBf16AsF32) {
  const fs::path dir = temp_dir();
  const std::vector<float> w = {1.0f, 0.1f, -3.3333f, 1e-3f, 300.7f, -0.0f};
  const TensorToWrite t{"model.embed_tokens.weight", {2, 3}, w.data()};
  write_checkpoint_dir(dir, std::span(&t, 1), DType::BF16, kDefaultMaxShardBytes);
  const CheckpointReader r(dir);
  EXPECT_EQ(r.info(t.name).dtype, DType::BF16);
  std::vector<float> got(6);
  r.read_f32(t.name, std::vector<int64_t>{2, 3}, got.data());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(got[i], bf16_to_f32(f32_to_bf16(w[i]))) << i;
  EXPECT_NEAR(got[1], 0.1f, 1e-3f);
}

// A rank reads only its part of a tensor: any element range equals that slice of the whole
// tensor, in bf16 and across shard files, and reads again after its pages were given back.
TEST(Checkpoint, RangesReadOnlyTheirElements) {
  const fs::path dir = temp_dir();
  std::vector<float> w(3000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i) - 7.0f;
  const std::vector<TensorToWrite> ts = {{"x", {30, 100}, w.data()}, {"y", {3000}, w.data()}};
  write_checkpoint_dir(dir, ts, DType::BF16, 7000);  // one tensor per shard file
  const CheckpointReader r(dir);
  ASSERT_NE(r.file_of("x"), r.file_of("y"));
  std::vector<float> whole(3000);
  r.read_f32("x", std::vector<int64_t>{30, 100}, whole.data());
  for (const auto& [b, n] : std::vector<std::pair<size_t, size_t>>{
           {0, 3000}, {0, 1}, {1, 2047}, {2048, 952}, {2999, 1}, {1500, 0}}) {
    for (const char* name : {"x", "y"}) {
      const std::vector<int64_t> shape =
          name[0] == 'x' ? std::vector<int64_t>{30, 100} : std::vector<int64_t>{3000};
      std::vector<float> got(n + 1, 42.0f);
      r.read_f32_range(name, shape, b, n, got.data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], whole[b + i]) << name << " " << b + i;
      EXPECT_EQ(got[n], 42.0f) << "wrote past the range";
    }
  }
  std::vector<float> buf(8);
  EXPECT_ANY_THROW(r.read_f32_range("y", std::vector<int64_t>{3000}, 2995, 8, buf.data()));
  expect_error(
      [&] {
        r.read_f32_range("y", std::vector<int64_t>{30, 100}, 0, 1, buf.data());
      },
      {"tensor y has shape [3000], expected [30, 100]"});
}

TEST(Checkpoint, MissingPathsNameThemselves) {
  const fs::path dir = temp_dir();
  expect_error([&] { CheckpointReader r(dir / "nope"); }, {(dir / "nope").string(), "no such"});
  expect_error([&] { CheckpointReader r(dir); },
               {dir.string(), "model.safetensors", "model.safetensors.index.json"});
}

TEST(Checkpoint, MissingTensorAndWrongShape) {
  const fs::path dir = temp_dir();
  const Model m;
  write_checkpoint_dir(dir, m.tensors, DType::F32, 40);
  const CheckpointReader r(dir);
  expect_error([&] { r.info("lm_head.weight"); }, {dir.string(), "lm_head.weight"});
  expect_error([&] { r.file_of("lm_head.weight"); }, {dir.string(), "lm_head.weight"});
  std::vector<float> buf(16);
  expect_error([&] { r.read_f32("lm_head.weight", std::vector<int64_t>{2}, buf.data()); },
               {dir.string(), "lm_head.weight"});
  const std::string shard = (dir / "model-00002-of-00003.safetensors").string();
  expect_error([&] { r.read_f32("a", std::vector<int64_t>{4}, buf.data()); },
               {shard + ": tensor a has shape [2, 2], expected [4]"});
  expect_error(
      [&] {
        r.read_f32("c", std::vector<int64_t>{2, 8}, buf.data());
      },
      {"tensor c has shape [4, 4], expected [2, 8]"});
}

class BrokenIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir();
    write_checkpoint_dir(dir_, model_.tensors, DType::F32, 40);
    index_ = read_json_file(dir_ / "model.safetensors.index.json");
  }
  void save_index() { write_file_atomic(dir_ / "model.safetensors.index.json", index_.dump(2)); }

  Model model_;
  fs::path dir_;
  Json index_;
};

TEST_F(BrokenIndex, MissingShard) {
  fs::remove(dir_ / "model-00003-of-00003.safetensors");
  expect_error([&] { CheckpointReader r(dir_); },
               {"model.safetensors.index.json", "model-00003-of-00003.safetensors", "not exist"});
}

TEST_F(BrokenIndex, MappedTensorNotInShard) {
  index_["weight_map"]["ghost"] = "model-00001-of-00003.safetensors";
  save_index();
  expect_error([&] { CheckpointReader r(dir_); },
               {(dir_ / "model-00001-of-00003.safetensors").string(), "ghost"});
}

TEST_F(BrokenIndex, ShardTensorNotInMap) {
  index_["weight_map"].erase("d");
  save_index();
  expect_error([&] { CheckpointReader r(dir_); },
               {(dir_ / "model-00003-of-00003.safetensors").string(), "tensor d", "weight_map"});
}

TEST_F(BrokenIndex, TensorMappedToTheWrongShard) {
  index_["weight_map"]["a"] = "model-00003-of-00003.safetensors";
  save_index();
  expect_error([&] { CheckpointReader r(dir_); },
               {(dir_ / "model-00003-of-00003.safetensors").string(), "tensor a"});
}

TEST_F(BrokenIndex, ShardOutsideTheDirectory) {
  index_["weight_map"]["a"] = "../model-00002-of-00003.safetensors";
  save_index();
  expect_error([&] { CheckpointReader r(dir_); }, {"model.safetensors.index.json", "tensor a"});
}

TEST_F(BrokenIndex, MalformedIndex) {
  write_file_atomic(dir_ / "model.safetensors.index.json", "{\"weight_map\": {");
  expect_error([&] { CheckpointReader r(dir_); }, {"model.safetensors.index.json", "malformed"});
  write_file_atomic(dir_ / "model.safetensors.index.json", "{\"metadata\": {}}");
  expect_error([&] { CheckpointReader r(dir_); }, {"model.safetensors.index.json", "weight_map"});
}

TEST_F(BrokenIndex, CorruptShardNamesShardAndTensor) {
  const fs::path shard = dir_ / "model-00001-of-00003.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  expect_error([&] { CheckpointReader r(dir_); }, {shard.string(), "tensor c", "truncated"});
}

}  // namespace
}  // namespace kiln
