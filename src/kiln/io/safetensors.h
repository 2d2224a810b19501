// Hugging Face safetensors files: strict header parsing, memory-mapped reading, streaming writes.
//
// Layout of a file: [u64 little-endian header length N][N bytes of JSON header][data section].
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} where the
// offsets are bytes within the data section, plus an optional "__metadata__" object of strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/file.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// Headers larger than this are rejected as absurd (the limit the reference implementation uses).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets within the data section: [begin, end)
  uint64_t end = 0;

  size_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // ordered by data offset, i.e. as laid out in the file
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length: where the data section starts in the file
};

// Parses and validates the header of a whole safetensors file held in `data[0, size)`. Checks
// the length prefix, the JSON, every entry (dtype F32/BF16/F16, shape, offsets within the data
// section, byte length == numel * dtype size), duplicate keys and overlapping tensors. Every
// failure is a one-line kiln::Error naming `what` (the file path) and the tensor when there is
// one. Never reads outside [data, data + size), whatever the bytes.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size,
                                           const std::string& what);

// Number of elements of a shape; nullopt when a dimension is negative or the product overflows.
std::optional<uint64_t> checked_numel(std::span<const int64_t> shape);

// "[2, 3]": shapes as they appear in error messages.
std::string format_shape(std::span<const int64_t> shape);

// A read-only, memory-mapped safetensors file with a validated header. Move-only.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const fs::path& path);

  const fs::path& path() const { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // The tensor's raw bytes in the map: t.nbytes() bytes, possibly unaligned. `t` must be one of
  // tensors().
  const uint8_t* data(const TensorInfo& t) const;
  // Converts the tensor to f32 into dst[0, t.numel()), whatever the alignment of its bytes.
  void read_f32(const TensorInfo& t, float* dst) const;
  // Elements [begin, begin + count) of the tensor (flat, row-major), converted to f32 into
  // dst[0, count). Only the bytes of that range are touched.
  void read_f32_range(const TensorInfo& t, size_t begin, size_t count, float* dst) const;
  // Drops the mapped pages wholly inside elements [begin, begin + count) of `t` from this
  // process's resident set (MappedFile::release).
  void release(const TensorInfo& t, size_t begin, size_t count) const;

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index in header_.tensors
};

// One tensor to write: `data` holds numel(shape) floats, row-major. For streaming writes,
// `data` may be null and `source` set instead: it is called once, in write order, right before
// the tensor's bytes are written, and returns the data (valid until the next call), so a writer
// holds one tensor (or one unit) at a time, never the whole model.
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
  std::function<const float*()> source = nullptr;
};

// Checks names (non-empty, unique, not "__metadata__"), shapes (non-negative, no overflow) and
// data pointers; errors name `what` and the tensor. Returns the data-section size in `dtype`.
uint64_t check_tensors_to_write(std::span<const TensorToWrite> tensors, DType dtype,
                                const std::string& what);

// Writes a safetensors file atomically (temporary + fsync + rename), converting f32 to `dtype`.
// Tensors are laid out in the given order; the header is compact JSON padded with spaces to a
// multiple of 8 bytes, as the reference writer does. Data is streamed tensor by tensor in
// bounded chunks, never assembled in memory. An empty `metadata` writes no "__metadata__".
// Returns the file's length and checksum, digested while writing.
FileDigest write_safetensors(const fs::path& path, std::span<const TensorToWrite> tensors,
                             DType dtype, const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln
