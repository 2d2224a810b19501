// TensorBoard event files read back by the format's own rules: each record is a little-endian
// uint64 length, the masked CRC-32C of those 8 bytes, the data and the masked CRC-32C of the
// data, and the data is an Event proto (decoded with the generated messages, whose field numbers
// are TensorBoard's). Then a real run: every step's scalars at their step, equal to metrics.jsonl.
#include "kiln/train/tensorboard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "kiln/base/crc32c.h"
#include "kiln/base/error.h"
#include "tensorboard_event.pb.h"

namespace kiln {
namespace {

uint64_t le(std::string_view b) {
  uint64_t v = 0;
  for (size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
  return v;
}

// Every Event of a TFRecord file; throws (naming the record) on a bad length, CRC or proto.
std::vector<tensorboard::Event> read_events(const std::string& bytes) {
  std::vector<tensorboard::Event> out;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = out.size();
    if (bytes.size() - at < 12) fail("record {}: truncated header", n);
    const std::string_view len_bytes(bytes.data() + at, 8);
    const uint64_t len = le(len_bytes);
    if (le(std::string_view(bytes.data() + at + 8, 4)) != masked_crc32c(len_bytes)) {
      fail("record {}: length CRC mismatch", n);
    }
    if (bytes.size() - at - 12 < len + 4) fail("record {}: truncated data", n);
    const std::string_view data(bytes.data() + at + 12, len);
    if (le(std::string_view(bytes.data() + at + 12 + len, 4)) != masked_crc32c(data)) {
      fail("record {}: data CRC mismatch", n);
    }
    tensorboard::Event e;
    if (!e.ParseFromArray(data.data(), static_cast<int>(data.size()))) {
      fail("record {}: not an Event", n);
    }
    out.push_back(std::move(e));
    at += 12 + len + 4;
  }
  return out;
}

fs::path temp_dir(const std::string& name) { return testing::fresh_path("kiln_tensorboard", name); }

TEST(TfRecord, FramingByHand) {
  const std::string r = tfrecord("abc");
  ASSERT_EQ(r.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(r.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(le(r.substr(8, 4)), masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(le(r.substr(15, 4)), masked_crc32c("abc"));
}

TEST(TensorBoardWriter, EventsReadBackAndCorruptionIsCaught) {
  const fs::path d = temp_dir("unit");
  fs::path file;
  {
    TensorBoardWriter w(d);
    file = w.path();
    w.write(1, {{"loss", 2.5}, {"lr", 1e-4}});
    w.write_row(2, Json{{"step", 2},
                        {"loss", 2.25},
                        {"eval_loss", 3.0},
                        {"tokens", 99},
                        {"peak_rss_mib", 12.5}});
  }
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::string bytes = read_file(file);
  const std::vector<tensorboard::Event> ev = read_events(bytes);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  EXPECT_GT(ev[0].wall_time(), 1.6e9);
  EXPECT_EQ(ev[1].step(), 1);
  ASSERT_EQ(ev[1].summary().value_size(), 2);
  EXPECT_EQ(ev[1].summary().value(0).tag(), "loss");
  EXPECT_EQ(ev[1].summary().value(0).simple_value(), 2.5f);
  EXPECT_EQ(ev[1].summary().value(1).simple_value(), 1e-4f);
  EXPECT_EQ(ev[2].step(), 2);
  std::map<std::string, float> row;
  for (const auto& v : ev[2].summary().value()) row[v.tag()] = v.simple_value();
  EXPECT_EQ(row, (std::map<std::string, float>{
                     {"loss", 2.25f}, {"eval_loss", 3.0f}, {"memory/peak_rss_mib", 12.5f}}));

  std::string bad = bytes;
  bad[bad.size() - 6] ^= 1;  // a byte of the last record's data
  EXPECT_THROW(read_events(bad), Error);
  bad = bytes;
  bad[0] ^= 1;  // the first length
  EXPECT_THROW(read_events(bad), Error);
  fs::remove_all(d);
}

TEST(TensorBoardRun, EveryStepsScalarsAtTheirStep) {
  const fs::path d = temp_dir("run");
  fs::create_directories(d);
  ASSERT_EQ(testing::run_kiln("init --config tiny --out " + (d / "init").string()).code, 0);
  const std::string data = std::string(KILN_SOURCE_DIR) + "/assets/demo/tokens.jsonl";
  write_file_atomic(d / "r.yaml", "model:\n  path: " + (d / "init").string() +
                                      "\ndata:\n  train: " + data + "\n  eval: " + data +
                                      "\n  seq_len: 64\ntrain:\n  max_steps: 4\n"
                                      "eval:\n  every_steps: 2\n  max_batches: 2\n"
                                      "output:\n  dir: " +
                                      (d / "run").string() + "\n");
  const testing::CmdResult r = testing::run_kiln("train " + (d / "r.yaml").string());
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(d / "run/tensorboard")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const std::vector<tensorboard::Event> ev = read_events(read_file(files[0]));
  ASSERT_EQ(ev.size(), 5u);  // file_version + 4 steps
  std::istringstream metrics(read_file(d / "run/metrics.jsonl"));
  for (int step = 1; step <= 4; ++step) {
    std::string line;
    ASSERT_TRUE(std::getline(metrics, line));
    const Json row = parse_json(line, "metrics.jsonl");
    const tensorboard::Event& e = ev[step];
    EXPECT_EQ(e.step(), step);
    std::map<std::string, float> got, want;
    for (const auto& v : e.summary().value()) got[v.tag()] = v.simple_value();
    for (const auto& [field, tag] : tensorboard_scalars()) {
      if (row.contains(field)) want[tag] = static_cast<float>(row.at(field).get<double>());
    }
    EXPECT_EQ(got, want) << line;
    for (const char* tag : {"loss", "lr", "grad_norm", "tokens_per_s", "memory/peak_rss_mib"}) {
      EXPECT_TRUE(got.contains(tag)) << tag << " at step " << step;
    }
    EXPECT_EQ(got.contains("eval_loss"), step % 2 == 0) << step;
  }
  // output.tensorboard=false writes none.
  const testing::CmdResult off =
      testing::run_kiln("train " + (d / "r.yaml").string() +
                        " output.tensorboard=false output.dir=" + (d / "off").string());
  ASSERT_EQ(off.code, 0) << off.out;
  EXPECT_FALSE(fs::exists(d / "off/tensorboard"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
