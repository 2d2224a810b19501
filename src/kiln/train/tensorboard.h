// TensorBoard event files, as tf.summary writes them: output.dir/tensorboard/
// events.out.tfevents.<unix seconds>.<host>, a sequence of TFRecords
//
//   uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes |
//   data (a serialized Event) | uint32 masked CRC-32C of data
//
// starting with Event{file_version: "brain.Event:2"}, then one Event per logged step whose Summary
// holds a simple_value per scalar. Each record is flushed as it is written, so a crash loses at
// most the step in flight; `tensorboard --logdir output.dir/tensorboard` reads the directory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {

// TFRecord framing of one record.
std::string tfrecord(std::string_view data);

// The metrics row fields written as scalars, and their TensorBoard tags: loss, eval_loss, lr,
// grad_norm, tokens_per_s and peak_rss_mib (as "memory/peak_rss_mib").
const std::vector<std::pair<std::string, std::string>>& tensorboard_scalars();

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it (a resumed run adds a file; TensorBoard merges them).
  explicit TensorBoardWriter(const fs::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at `step` with the scalars `values` (tag, value).
  void write(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // The tensorboard_scalars() that `row` (a metrics.jsonl row) holds.
  void write_row(int64_t step, const Json& row);
  const fs::path& path() const { return path_; }

 private:
  void record(const std::string& event);

  fs::path path_;
  std::FILE* f_ = nullptr;
};

}  // namespace kiln
