#include "kiln/io/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include "kiln/base/error.h"
#include "kiln/base/json.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; kiln maps it without byte swapping");

namespace {

// A valid header nests at most 3 deep (object -> entry -> shape); allow some slack for unknown
// fields but bound the work a hostile header can cause.
constexpr int kMaxHeaderDepth = 16;
// Names and parser messages come from untrusted bytes: keep error messages one short line.
constexpr size_t kMaxQuotedChars = 200;

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, kMaxQuotedChars)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  if (s.size() > kMaxQuotedChars) out += "...";
  return out;
}

// First pass over the header JSON. A DOM parse silently keeps the last of duplicate keys, so
// duplicates are caught here; the depth bound keeps the DOM pass small whatever the input.
class HeaderValidator {
 public:
  explicit HeaderValidator(const std::string& what) : what_(what) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }

  bool start_object(size_t) {
    enter();
    keys_.emplace_back();
    return true;
  }
  bool key(Json::string_t& k) {
    if (keys_.size() == 1) tensor_ = k;
    if (!keys_.back().insert(k).second) {
      if (keys_.size() == 1) fail("{}: duplicate tensor {}", what_, printable(k));
      fail("{}: tensor {}: duplicate key {}", what_, printable(tensor_), printable(k));
    }
    return true;
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(size_t) {
    enter();
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool parse_error(size_t, const std::string&, const Json::exception& e) {
    fail("{}: malformed header JSON: {}", what_, printable(e.what()));
  }

 private:
  void enter() {
    if (++depth_ > kMaxHeaderDepth) {
      fail("{}: header JSON nests deeper than {} levels", what_, kMaxHeaderDepth);
    }
  }

  const std::string& what_;
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // keys seen in each open object
  std::string tensor_;                       // the top-level key being read
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

TensorInfo parse_entry(const std::string& name, const Json& e, uint64_t data_size,
                       const std::string& what) {
  const std::string tname = printable(name);
  if (!e.is_object()) fail("{}: tensor {}: entry is not a JSON object", what, tname);
  TensorInfo t;
  t.name = name;

  auto dt = e.find("dtype");
  if (dt == e.end()) fail("{}: tensor {}: missing \"dtype\"", what, tname);
  if (!dt->is_string()) fail("{}: tensor {}: \"dtype\" is not a string", what, tname);
  const auto& dname = dt->get_ref<const std::string&>();
  auto dtype = dtype_from_name(dname);
  if (!dtype) {
    fail("{}: tensor {}: unsupported dtype {} (kiln reads F32, BF16 and F16)", what, tname,
         printable(dname));
  }
  t.dtype = *dtype;

  auto sh = e.find("shape");
  if (sh == e.end()) fail("{}: tensor {}: missing \"shape\"", what, tname);
  if (!sh->is_array()) fail("{}: tensor {}: \"shape\" is not an array", what, tname);
  t.shape.reserve(sh->size());
  for (const Json& d : *sh) {
    // nlohmann stores every non-negative integer literal as unsigned; negatives and fractions
    // land in the other number types.
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail("{}: tensor {}: \"shape\" must be an array of non-negative integers", what, tname);
    }
    t.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }

  auto off = e.find("data_offsets");
  if (off == e.end()) fail("{}: tensor {}: missing \"data_offsets\"", what, tname);
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    fail("{}: tensor {}: \"data_offsets\" must be [begin, end] with non-negative integers", what,
         tname);
  }
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.begin > t.end) {
    fail("{}: tensor {}: data_offsets [{}, {}] end before they begin", what, tname, t.begin, t.end);
  }
  if (t.end > data_size) {
    fail(
        "{}: tensor {}: data_offsets [{}, {}] run past the data section ({} bytes); is the file "
        "truncated?",
        what, tname, t.begin, t.end, data_size);
  }

  const auto numel = checked_numel(t.shape);
  uint64_t bytes = 0;
  if (!numel || __builtin_mul_overflow(*numel, dtype_size(t.dtype), &bytes)) {
    fail("{}: tensor {}: shape {} is too large", what, tname, format_shape(t.shape));
  }
  if (bytes != t.end - t.begin) {
    fail("{}: tensor {}: shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", what,
         tname, format_shape(t.shape), dtype_name(t.dtype), bytes, t.begin, t.end, t.end - t.begin);
  }
  return t;
}

}  // namespace

std::optional<uint64_t> checked_numel(std::span<const int64_t> shape) {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) return std::nullopt;
  // Any zero dimension makes the product zero, however large the others.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  return n;
}

size_t TensorInfo::numel() const {
  const auto n = checked_numel(shape);
  KILN_CHECK(n.has_value(), "tensor {}: bad shape {}", name, format_shape(shape));
  return static_cast<size_t>(*n);
}

std::string format_shape(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size,
                                           const std::string& what) {
  if (size < 8) {
    fail("{}: file is {} bytes, too short for a safetensors header (8-byte length prefix)", what,
         size);
  }
  const uint64_t n = read_u64_le(data);
  if (n > kMaxSafetensorsHeaderBytes) {
    fail("{}: header length {} is out of range (limit {} bytes); not a safetensors file?", what, n,
         kMaxSafetensorsHeaderBytes);
  }
  if (n > size - 8) {
    fail(
        "{}: header length {} exceeds the {} bytes after the length prefix; is the file "
        "truncated?",
        what, n, size - 8);
  }
  const auto* text = reinterpret_cast<const char*>(data + 8);
  const uint64_t data_size = size - 8 - n;

  HeaderValidator validator(what);
  Json root;
  try {
    Json::sax_parse(text, text + n, &validator);
    root = Json::parse(text, text + n);
  } catch (const Json::exception& e) {
    fail("{}: malformed header JSON: {}", what, printable(e.what()));
  }
  if (!root.is_object()) fail("{}: header is not a JSON object", what);

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  h.tensors.reserve(root.size());
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail("{}: \"__metadata__\" is not a JSON object", what);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          fail("{}: \"__metadata__\" value for {} is not a string", what, printable(mk));
        }
        h.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    h.tensors.push_back(parse_entry(key, value, data_size, what));
  }

  // File order; then no two non-empty byte ranges may share a byte.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  const TensorInfo* prev = nullptr;  // the non-empty tensor reaching furthest so far
  for (const TensorInfo& t : h.tensors) {
    if (t.begin == t.end) continue;
    if (prev != nullptr && t.begin < prev->end) {
      fail("{}: tensors {} [{}, {}] and {} [{}, {}] overlap in the data section", what,
           printable(prev->name), prev->begin, prev->end, printable(t.name), t.begin, t.end);
    }
    prev = &t;
  }
  return h;
}

SafetensorsFile::SafetensorsFile(const fs::path& path)
    : file_(path), header_(parse_safetensors_header(file_.data(), file_.size(), path.string())) {
  for (size_t i = 0; i < header_.tensors.size(); ++i) by_name_.emplace(header_.tensors[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

const uint8_t* SafetensorsFile::data(const TensorInfo& t) const {
  KILN_CHECK(t.begin <= t.end && t.end <= file_.size() - header_.data_offset,
             "{}: tensor {} is not from this file", path().string(), t.name);
  return file_.data() + header_.data_offset + t.begin;
}

void SafetensorsFile::read_f32(const TensorInfo& t, float* dst) const {
  read_f32_range(t, 0, t.numel(), dst);
}

void SafetensorsFile::read_f32_range(const TensorInfo& t, size_t begin, size_t count,
                                     float* dst) const {
  const size_t n = t.numel();
  KILN_CHECK(begin <= n && count <= n - begin, "{}: tensor {}: range [{}, {}) outside its {}",
             path().string(), t.name, begin, begin + count, n);
  const size_t esize = dtype_size(t.dtype);
  const uint8_t* src = data(t) + begin * esize;
  if (count == 0) return;
  if (reinterpret_cast<uintptr_t>(src) % esize == 0) {
    convert_to_f32(t.dtype, src, dst, count);
    return;
  }
  // Writers other than the reference one may leave the data section at an odd offset; copy
  // through an aligned bounce buffer rather than read misaligned 16-bit values.
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<uint32_t> bounce(kChunk);  // uint32_t: aligned for every dtype kiln reads
  for (size_t i = 0; i < count; i += kChunk) {
    const size_t m = std::min(kChunk, count - i);
    std::memcpy(bounce.data(), src + i * esize, m * esize);
    convert_to_f32(t.dtype, bounce.data(), dst + i, m);
  }
}

void SafetensorsFile::release(const TensorInfo& t, size_t begin, size_t count) const {
  const size_t esize = dtype_size(t.dtype);
  KILN_CHECK(begin <= t.numel() && count <= t.numel() - begin, "{}: tensor {}: bad range",
             path().string(), t.name);
  file_.release(data(t) + begin * esize, count * esize);
}

}  // namespace kiln
