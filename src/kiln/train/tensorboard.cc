#include "kiln/train/tensorboard.h"

#include <unistd.h>

#include <chrono>

#include "kiln/base/crc32c.h"
#include "kiln/base/error.h"
#include "tensorboard_event.pb.h"

namespace kiln {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

}  // namespace

std::string tfrecord(std::string_view data) {
  std::string out;
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

const std::vector<std::pair<std::string, std::string>>& tensorboard_scalars() {
  static const std::vector<std::pair<std::string, std::string>> kScalars = {
      {"loss", "loss"},
      {"eval_loss", "eval_loss"},
      {"lr", "lr"},
      {"grad_norm", "grad_norm"},
      {"tokens_per_s", "tokens_per_s"},
      {"peak_rss_mib", "memory/peak_rss_mib"}};
  return kScalars;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create directory: {}", dir.string(), ec.message());
  const double t = now_seconds();
  path_ = dir / fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(t), host_name());
  f_ = std::fopen(path_.c_str(), "ab");
  if (f_ == nullptr) fail("{}: cannot open for writing", path_.string());
  tensorboard::Event e;
  e.set_wall_time(t);
  e.set_file_version("brain.Event:2");
  record(e.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::write(int64_t step,
                              const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::SummaryValue* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  record(e.SerializeAsString());
}

void TensorBoardWriter::write_row(int64_t step, const Json& row) {
  std::vector<std::pair<std::string, double>> values;
  for (const auto& [field, tag] : tensorboard_scalars()) {
    const auto it = row.find(field);
    if (it != row.end() && it->is_number()) values.emplace_back(tag, it->get<double>());
  }
  write(step, values);
}

void TensorBoardWriter::record(const std::string& event) {
  const std::string r = tfrecord(event);
  if (std::fwrite(r.data(), 1, r.size(), f_) != r.size() || std::fflush(f_) != 0) {
    fail("{}: write failed", path_.string());
  }
}

}  // namespace kiln
