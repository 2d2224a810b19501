// safetensors format: round trips per dtype, the exact bytes written, and header validation.
#include "kiln/io/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "io_test_util.h"
#include "kiln/base/file.h"

namespace kiln {
namespace {

using test::expect_error;
using test::raw_safetensors;
using test::temp_dir;

const std::vector<float> kValues = {1.0f,  -2.5f,  3.14159265f, 1e-3f, 65504.0f, 1e5f,       -0.0f,
                                    6e-8f, 1e-40f, 0.333333f,   -7.0f, 1024.5f,  2.0f / 3.0f};

SafetensorsHeader parse(const std::string& bytes, const std::string& what = "x.safetensors") {
  return parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                  what);
}

// What a value becomes after a trip through `dtype`.
float through(DType dtype, float v) {
  switch (dtype) {
    case DType::F32:
      return v;
    case DType::BF16:
      return bf16_to_f32(f32_to_bf16(v));
    case DType::F16:
      return f16_to_f32(f32_to_f16(v));
  }
  return NAN;
}

class RoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(RoundTrip, WriteThenReadConvertsAsExpected) {
  const DType dtype = GetParam();
  const fs::path path = temp_dir() / "t.safetensors";
  std::vector<float> a(kValues.begin(), kValues.begin() + 12);  // (3, 4)
  std::vector<float> b = {kValues[12]};                         // scalar
  std::vector<TensorToWrite> ts = {
      {"layer.a", {3, 4}, a.data()}, {"b", {}, b.data()}, {"empty", {0, 5}, nullptr}};
  write_safetensors(path, ts, dtype, {{"format", "pt"}, {"note", "x"}});

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}}));
  ASSERT_EQ(f.tensors().size(), 3u);
  // File order is the order given.
  EXPECT_EQ(f.tensors()[0].name, "layer.a");
  EXPECT_EQ(f.tensors()[1].name, "b");
  EXPECT_EQ(f.tensors()[2].name, "empty");
  EXPECT_EQ(f.find("nope"), nullptr);

  const TensorInfo* ta = f.find("layer.a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, dtype);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ta->numel(), 12u);
  EXPECT_EQ(ta->nbytes(), 12 * dtype_size(dtype));
  std::vector<float> got(12);
  f.read_f32(*ta, got.data());
  for (size_t i = 0; i < 12; ++i) {
    const float want = through(dtype, a[i]);
    EXPECT_EQ(std::memcmp(&got[i], &want, 4), 0)
        << "element " << i << ": " << got[i] << " vs " << want;  // bitwise: -0 and subnormals too
  }
  float s = 0;
  f.read_f32(*f.find("b"), &s);
  EXPECT_EQ(s, through(dtype, b[0]));
  EXPECT_EQ(f.find("empty")->numel(), 0u);
  EXPECT_EQ(f.find("empty")->shape, (std::vector<int64_t>{0, 5}));

  // Raw bytes are the dtype's encoding, starting 8-byte aligned.
  const std::string bytes = read_file(path);
  const SafetensorsHeader h = parse(bytes);
  EXPECT_EQ(h.data_offset % 8, 0u);
  if (dtype == DType::BF16) {
    uint16_t raw;
    std::memcpy(&raw, bytes.data() + h.data_offset + 2, 2);
    EXPECT_EQ(raw, f32_to_bf16(a[1]));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RoundTrip, ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Safetensors, WritesTheReferenceLayout) {
  const fs::path path = temp_dir() / "t.safetensors";
  const float v[2] = {1.0f, -2.0f};
  const TensorToWrite t{"a", {2}, v};
  write_safetensors(path, std::span(&t, 1), DType::F32, {{"format", "pt"}});
  // As safetensors.torch.save_file writes it: compact JSON, space padding to 8 bytes.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"
      "   ";
  const std::string expected =
      raw_safetensors(header, std::string_view(reinterpret_cast<const char*>(v), 8));
  EXPECT_EQ(read_file(path), expected);
  EXPECT_EQ(read_file(path), read_file(fs::path(KILN_SOURCE_DIR) /
                                       "fuzz/corpus/safetensors/f32_with_metadata.safetensors"));
}

TEST(Safetensors, NoMetadataWritesNoMetadataKey) {
  const fs::path path = temp_dir() / "t.safetensors";
  write_safetensors(path, {}, DType::F32);
  EXPECT_EQ(read_file(path), raw_safetensors("{}      ", ""));
  EXPECT_TRUE(SafetensorsFile(path).tensors().empty());
}

TEST(Safetensors, ReadsMisalignedData) {
  // An odd header length (not from the reference writer) leaves the bf16 data at odd addresses.
  const uint16_t vals[3] = {f32_to_bf16(1.0f), f32_to_bf16(2.0f), f32_to_bf16(-3.0f)};
  const std::string header = R"({"b":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})";
  ASSERT_EQ(header.size() % 2, 1u);
  const fs::path path = temp_dir() / "odd.safetensors";
  write_file_atomic(path,
                    raw_safetensors(header, std::string_view((const char*)vals, sizeof vals)));
  SafetensorsFile f(path);
  std::vector<float> got(3);
  f.read_f32(f.tensors()[0], got.data());
  EXPECT_EQ(got, (std::vector<float>{1.0f, 2.0f, -3.0f}));
}

TEST(Safetensors, ParsesInFileOrderWithZeroSizedTensors) {
  const std::string header = R"({"z":{"dtype":"F16","shape":[2],"data_offsets":[4,8]},)"
                             R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                             R"("a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]}})";
  const SafetensorsHeader h = parse(raw_safetensors(header, std::string(8, '\0')));
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[1].name, "e");
  EXPECT_EQ(h.tensors[2].name, "z");
  EXPECT_EQ(h.data_offset, 8 + header.size());
  EXPECT_TRUE(h.metadata.empty());
}

TEST(Safetensors, MissingFileNamesIt) {
  const fs::path path = temp_dir() / "absent.safetensors";
  expect_error([&] { SafetensorsFile f(path); }, {path.string()});
}

TEST(Safetensors, TruncatedFileNamesFileAndTensor) {
  const fs::path path = temp_dir() / "cut.safetensors";
  std::vector<float> a(16, 1.0f);
  const TensorToWrite t{"weights.a", {4, 4}, a.data()};
  write_safetensors(path, std::span(&t, 1), DType::F32);
  fs::resize_file(path, fs::file_size(path) - 10);
  expect_error([&] { SafetensorsFile f(path); }, {path.string(), "weights.a", "truncated"});
  fs::resize_file(path, 5);
  expect_error([&] { SafetensorsFile f(path); }, {path.string(), "too short"});
  fs::resize_file(path, 0);
  expect_error([&] { SafetensorsFile f(path); }, {path.string(), "too short"});
}

TEST(Safetensors, HeaderLengthOutOfRange) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  expect_error([&] { parse(raw_safetensors(header, "abcd", 200'000'000), "big.st"); },
               {"big.st", "header length 200000000", "out of range"});
  expect_error([&] { parse(raw_safetensors(header, "abcd", UINT64_MAX - 1), "huge.st"); },
               {"huge.st", "out of range"});
  expect_error([&] { parse(raw_safetensors(header, "abcd", header.size() + 5), "long.st"); },
               {"long.st", "exceeds"});
}

TEST(Safetensors, MalformedHeaders) {
  const std::string data(8, '\0');
  expect_error([&] { parse(raw_safetensors(R"({"a":{"dtype":)", data), "m.st"); },
               {"m.st", "malformed header JSON"});
  expect_error([&] { parse(raw_safetensors("", data), "m.st"); }, {"m.st", "malformed"});
  expect_error([&] { parse(raw_safetensors("[1, 2]", data), "m.st"); },
               {"m.st", "not a JSON object"});
  expect_error([&] { parse(raw_safetensors(R"({"a":"F32"})", data), "m.st"); },
               {"m.st", "tensor a", "not a JSON object"});
  expect_error(
      [&] { parse(raw_safetensors(std::string(100, '[') + std::string(100, ']'), data), "m.st"); },
      {"m.st", "deeper"});
  expect_error([&] { parse(raw_safetensors("{\"a\xff\":1}", data), "m.st"); },
               {"m.st", "malformed"});
  expect_error([&] { parse(raw_safetensors(R"({"__metadata__":{"k":1}})", data), "m.st"); },
               {"m.st", "__metadata__", "k"});
  expect_error([&] { parse(raw_safetensors(R"({"__metadata__":[]})", data), "m.st"); },
               {"m.st", "__metadata__"});
}

// Each entry below is a header for an 8-byte data section; the error must name the tensor "t".
TEST(Safetensors, InvalidEntriesNameTheTensor) {
  struct Case {
    const char* header;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", "unsupported dtype I64"},
      {R"({"t":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", "unsupported dtype f32"},
      {R"({"t":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", "\"dtype\" is not a string"},
      {R"({"t":{"shape":[2],"data_offsets":[0,8]}})", "missing \"dtype\""},
      {R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", "missing \"shape\""},
      {R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "non-negative"},
      {R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", "non-negative"},
      {R"({"t":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", "not an array"},
      {R"({"t":{"dtype":"F32","shape":[2]}})", "missing \"data_offsets\""},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", "[begin, end]"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", "[begin, end]"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "end before they begin"},
      {R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "run past the data section"},
      {R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "needs 12 bytes"},
      {R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})",
       "too large"},
      {R"({"t":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})",
       "non-negative"},
      {R"({"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       "duplicate key dtype"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"t":{}})", "duplicate tensor t"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    expect_error([&] { parse(raw_safetensors(c.header, std::string(8, '\0')), "bad.st"); },
                 {"bad.st", "tensor t", c.expect});
  }
}

TEST(Safetensors, OverlappingOffsetsNameBothTensors) {
  const std::string header = R"({"first":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("second":{"dtype":"BF16","shape":[2],"data_offsets":[6,10]}})";
  expect_error([&] { parse(raw_safetensors(header, std::string(16, '\0')), "ov.st"); },
               {"ov.st", "first", "second", "overlap"});
  // Zero-sized tensors occupy no bytes and never overlap.
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  EXPECT_EQ(parse(raw_safetensors(ok, std::string(8, '\0'))).tensors.size(), 2u);
}

TEST(Safetensors, ControlCharactersInNamesStayOnOneLine) {
  const std::string header = R"({"a\nb":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  expect_error([&] { parse(raw_safetensors(header, std::string(8, '\0')), "cc.st"); },
               {"cc.st", "a\\x0ab", "unsupported dtype"});
}

TEST(Safetensors, WriterRejectsBadTensors) {
  const fs::path path = temp_dir() / "w.safetensors";
  const float v[4] = {};
  const std::vector<TensorToWrite> dup = {{"x", {1}, v}, {"x", {1}, v}};
  expect_error([&] { write_safetensors(path, dup, DType::F32); },
               {path.string(), "duplicate", "x"});
  const std::vector<TensorToWrite> neg = {{"n", {2, -1}, v}};
  expect_error([&] { write_safetensors(path, neg, DType::BF16); }, {path.string(), "n", "[2, -1]"});
  const std::vector<TensorToWrite> null = {{"p", {2}, nullptr}};
  expect_error([&] { write_safetensors(path, null, DType::F16); }, {path.string(), "p", "null"});
  const std::vector<TensorToWrite> reserved = {{"__metadata__", {1}, v}};
  expect_error([&] { write_safetensors(path, reserved, DType::F32); }, {path.string(), "reserved"});
  const std::vector<TensorToWrite> utf = {{"bad\xff", {1}, v}};
  expect_error([&] { write_safetensors(path, utf, DType::F32); }, {path.string(), "UTF-8"});
  EXPECT_FALSE(fs::exists(path));
  int files = 0;
  for (const auto& e : fs::directory_iterator(path.parent_path())) files += e.is_regular_file();
  EXPECT_EQ(files, 0);  // no temporaries left behind
}

TEST(Safetensors, LargeTensorStreamsInChunks) {
  // More elements than one conversion chunk, with a tail.
  const size_t n = (size_t{1} << 20) * 2 + 7;
  std::vector<float> a(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>(i % 1000) * 0.5f;
  const fs::path path = temp_dir() / "big.safetensors";
  const TensorToWrite t{"big", {static_cast<int64_t>(n)}, a.data()};
  write_safetensors(path, std::span(&t, 1), DType::BF16);
  SafetensorsFile f(path);
  std::vector<float> got(n);
  f.read_f32(f.tensors()[0], got.data());
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], through(DType::BF16, a[i])) << i;
  EXPECT_EQ(got[n - 1], through(DType::BF16, a[n - 1]));
}

}  // namespace
}  // namespace kiln
