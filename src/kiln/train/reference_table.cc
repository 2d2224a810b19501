#include "kiln/train/reference_table.h"

#include <cstring>
#include <string>

#include "kiln/base/checksum.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"

namespace kiln {

namespace {
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'R', 'E', 'F', '1'};
constexpr size_t kHeader = sizeof kMagic + 2 * sizeof(uint64_t);
}  // namespace

ReferenceTable::ReferenceTable(size_t train_pairs, size_t eval_pairs)
    : train_(train_pairs), eval_(eval_pairs), values_(4 * (train_pairs + eval_pairs), 0.0) {}

size_t ReferenceTable::offset(size_t i, bool eval) const {
  KILN_CHECK(i < (eval ? eval_ : train_), "reference table: pair {} of {}", i,
             eval ? eval_ : train_);
  return 4 * (eval ? train_ + i : i);
}

double* ReferenceTable::pair(size_t i, bool eval) { return values_.data() + offset(i, eval); }

const double* ReferenceTable::pair(size_t i, bool eval) const {
  return values_.data() + offset(i, eval);
}

void ReferenceTable::rows_of(const Batch& batch, bool eval, double* out) const {
  for (int p = 0; 2 * p + 1 < batch.B; ++p) {
    const int64_t e = batch.examples[static_cast<size_t>(2 * p)];
    if (e < 0) {
      std::memset(out + 4 * p, 0, 4 * sizeof(double));
    } else {
      std::memcpy(out + 4 * p, pair(static_cast<size_t>(e), eval), 4 * sizeof(double));
    }
  }
}

void ReferenceTable::save(const std::filesystem::path& file) const {
  std::string bytes(kHeader + values_.size() * sizeof(double), '\0');
  const uint64_t counts[2] = {train_, eval_};
  std::memcpy(bytes.data(), kMagic, sizeof kMagic);
  std::memcpy(bytes.data() + sizeof kMagic, counts, sizeof counts);
  std::memcpy(bytes.data() + kHeader, values_.data(), values_.size() * sizeof(double));
  const uint64_t digest = xxh3_64(bytes);
  bytes.append(reinterpret_cast<const char*>(&digest), sizeof digest);
  write_file_atomic(file, bytes);
}

std::optional<ReferenceTable> ReferenceTable::load(const std::filesystem::path& file,
                                                   size_t train_pairs, size_t eval_pairs) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  const std::string bytes = read_file(file);
  ReferenceTable t(train_pairs, eval_pairs);
  const size_t payload = t.values_.size() * sizeof(double);
  uint64_t counts[2] = {0, 0}, digest = 0;
  if (bytes.size() >= kHeader) std::memcpy(counts, bytes.data() + sizeof kMagic, sizeof counts);
  if (bytes.size() != kHeader + payload + sizeof digest ||
      std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    fail(
        "{}: not a reference table of {} + {} pairs ({} bytes; it holds {} + {}): the data "
        "changed since it was computed? (delete it to compute it again from the base)",
        file.string(), train_pairs, eval_pairs, bytes.size(), counts[0], counts[1]);
  }
  std::memcpy(&digest, bytes.data() + kHeader + payload, sizeof digest);
  if (digest != xxh3_64(std::string_view(bytes).substr(0, kHeader + payload))) {
    fail("{}: damaged (its checksum does not match; delete it to compute it again)", file.string());
  }
  std::memcpy(t.values_.data(), bytes.data() + kHeader, payload);
  return t;
}

}  // namespace kiln
