// Writing safetensors files: header first, then each tensor converted and streamed in chunks.
#include <algorithm>
#include <set>

#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/io/safetensors.h"

namespace kiln {

namespace {

// Elements converted per write: bounds the extra memory a write needs (4 MiB at f32).
constexpr size_t kWriteChunk = size_t{1} << 20;

using OrderedJson = nlohmann::ordered_json;

}  // namespace

uint64_t check_tensors_to_write(std::span<const TensorToWrite> tensors, DType dtype,
                                const std::string& what) {
  std::set<std::string_view> names;
  uint64_t total = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty()) fail("{}: a tensor has an empty name", what);
    if (t.name == "__metadata__") fail("{}: the tensor name __metadata__ is reserved", what);
    if (!names.insert(t.name).second) fail("{}: duplicate tensor {}", what, t.name);
    const auto numel = checked_numel(t.shape);
    uint64_t bytes = 0;
    if (!numel || __builtin_mul_overflow(*numel, dtype_size(dtype), &bytes) ||
        __builtin_add_overflow(total, bytes, &total)) {
      fail("{}: tensor {}: invalid shape {}", what, t.name, format_shape(t.shape));
    }
    if (*numel > 0 && t.data == nullptr && !t.source) {
      fail("{}: tensor {}: data is null", what, t.name);
    }
  }
  return total;
}

FileDigest write_safetensors(const fs::path& path, std::span<const TensorToWrite> tensors,
                             DType dtype, const std::map<std::string, std::string>& metadata) {
  const std::string what = path.string();
  check_tensors_to_write(tensors, dtype, what);
  const size_t esize = dtype_size(dtype);

  // Key order as the reference writer emits it: "__metadata__" first, then tensors in data order.
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  size_t max_numel = 0;
  for (const TensorToWrite& t : tensors) {
    const size_t numel = static_cast<size_t>(*checked_numel(t.shape));
    max_numel = std::max(max_numel, numel);
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = std::string(dtype_name(dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = OrderedJson::array({offset, offset + numel * esize});
    header[t.name] = std::move(entry);
    offset += numel * esize;
  }
  std::string text;
  try {
    text = header.dump(-1, ' ', false, OrderedJson::error_handler_t::strict);
  } catch (const OrderedJson::exception& e) {
    fail("{}: tensor names and metadata must be valid UTF-8: {}", what, e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFileWriter out(path);
  const uint64_t header_len = text.size();
  out.write(&header_len, sizeof header_len);  // little-endian host: see safetensors.cc
  out.write(text);
  std::vector<uint8_t> chunk(dtype == DType::F32 ? 0 : std::min(max_numel, kWriteChunk) * esize);
  for (const TensorToWrite& t : tensors) {
    const size_t numel = static_cast<size_t>(*checked_numel(t.shape));
    const float* data = t.data != nullptr ? t.data : (numel > 0 ? t.source() : nullptr);
    if (numel > 0 && data == nullptr) fail("{}: tensor {}: source gave no data", what, t.name);
    if (dtype == DType::F32) {
      out.write(data, numel * esize);
      continue;
    }
    for (size_t i = 0; i < numel; i += kWriteChunk) {
      const size_t m = std::min(kWriteChunk, numel - i);
      convert_from_f32(dtype, data + i, chunk.data(), m);
      out.write(chunk.data(), m * esize);
    }
  }
  return out.commit();
}

}  // namespace kiln
