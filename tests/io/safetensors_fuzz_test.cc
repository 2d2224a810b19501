// Runs the libFuzzer entry point (fuzz/safetensors_header_fuzz.cc, linked in) in the ordinary
// test suite: over the seed corpus, then over thousands of deterministic mutations of valid files
// (bit flips, byte edits, truncations, length-field edits, number swaps). Every input must either
// parse into a consistent header or throw kiln::Error; the entry point aborts on an inconsistent
// header, and anything else escaping is a failure here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "io_test_util.h"
#include "kiln/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kiln {
namespace {

const fs::path kCorpus = fs::path(KILN_SOURCE_DIR) / "fuzz/corpus/safetensors";

struct Tally {
  int parsed = 0;
  int rejected = 0;
};

// An exact-size heap copy, so a sanitizer build catches any read past the end.
void run_one(const std::string& input, const std::string& label, Tally& tally) {
  const std::vector<uint8_t> buf(input.begin(), input.end());
  try {
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
    parse_safetensors_header(buf.data(), buf.size(), "fuzz");
    ++tally.parsed;
  } catch (const Error&) {
    ++tally.rejected;
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": a non-kiln exception escaped: " << e.what();
  } catch (...) {
    ADD_FAILURE() << label << ": an unknown exception escaped";
  }
}

std::vector<std::string> corpus() {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(kCorpus)) {
    if (e.is_regular_file()) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());  // deterministic order
  std::vector<std::string> out;
  for (const fs::path& p : paths) out.push_back(read_file(p));
  return out;
}

void set_header_len(std::string& s, uint64_t n) { std::memcpy(s.data(), &n, 8); }

uint64_t header_len(const std::string& s) {
  uint64_t n;
  std::memcpy(&n, s.data(), 8);
  return n;
}

// Mutations of one valid file; the header length is kept consistent where the point is to
// reach the JSON and entry checks rather than the length check.
void mutate_and_run(const std::string& base, uint64_t seed, int rounds, Tally& tally) {
  ASSERT_GT(base.size(), 8u);
  ASSERT_GT(header_len(base), 0u);
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const size_t hend = std::min<size_t>(base.size(), 8 + header_len(base));

  for (size_t len = 0; len <= base.size(); ++len) run_one(base.substr(0, len), "truncate", tally);

  const uint64_t n = header_len(base);
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, n - 1, n + 1, n + 8, uint64_t{base.size() - 8},
                     uint64_t{base.size() - 7}, uint64_t{100'000'000}, uint64_t{100'000'001},
                     uint64_t{1} << 32, uint64_t{1} << 63, UINT64_MAX, UINT64_MAX - 7}) {
    std::string s = base;
    set_header_len(s, v);
    run_one(s, "length field " + std::to_string(v), tally);
  }

  const char kInteresting[] = "{}[]\",:-0189e. \\\x00\xff\x7f\n";
  const std::vector<std::string> kNumbers = {"0",
                                             "-1",
                                             "1e3",
                                             "1.5",
                                             "18446744073709551615",
                                             "18446744073709551616",
                                             "9223372036854775807",
                                             "9223372036854775808",
                                             "4611686018427387904",
                                             "99999999999999999999"};
  for (int r = 0; r < rounds; ++r) {
    std::string s = base;
    switch (r % 5) {
      case 0:  // 1-4 bit flips anywhere
        for (size_t k = 0, m = 1 + pick(4); k < m; ++k) s[pick(s.size())] ^= char(1 << pick(8));
        break;
      case 1:  // 1-3 header bytes set to syntax characters
        for (size_t k = 0, m = 1 + pick(3); k < m; ++k) {
          s[8 + pick(hend - 8)] = kInteresting[pick(sizeof kInteresting - 1)];
        }
        break;
      case 2: {  // a header byte inserted or deleted, length field kept consistent
        const size_t at = 8 + pick(hend - 8);
        if (rng() % 2) {
          s.insert(s.begin() + at, kInteresting[pick(sizeof kInteresting - 1)]);
          set_header_len(s, header_len(s) + 1);
        } else {
          s.erase(at, 1);
          set_header_len(s, header_len(s) - 1);
        }
        break;
      }
      case 3: {  // a number in the header replaced, length field kept consistent
        std::vector<size_t> starts;
        for (size_t i = 8; i < hend; ++i) {
          if (std::isdigit(static_cast<unsigned char>(s[i])) &&
              !std::isdigit(static_cast<unsigned char>(s[i - 1]))) {
            starts.push_back(i);
          }
        }
        if (starts.empty()) break;
        const size_t at = starts[pick(starts.size())];
        size_t end = at;
        while (end < hend && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        const std::string& num = kNumbers[pick(kNumbers.size())];
        s.replace(at, end - at, num);
        set_header_len(s, header_len(s) + num.size() - (end - at));
        break;
      }
      case 4:  // data section cut short or extended
        if (rng() % 2) {
          s.resize(hend + pick(s.size() - hend + 1));
        } else {
          s.append(1 + pick(16), '\0');
        }
        break;
    }
    run_one(s, "mutation " + std::to_string(r) + " of seed " + std::to_string(seed), tally);
  }
}

TEST(SafetensorsFuzz, SeedCorpus) {
  const auto seeds = corpus();
  ASSERT_GE(seeds.size(), 5u) << kCorpus;
  Tally tally;
  for (size_t i = 0; i < seeds.size(); ++i) run_one(seeds[i], "seed " + std::to_string(i), tally);
  EXPECT_GE(tally.parsed, 3);    // the valid seeds
  EXPECT_GE(tally.rejected, 3);  // the deliberately broken ones
}

TEST(SafetensorsFuzz, MutationsOnlyParseOrFail) {
  // A written file with every dtype, metadata, a scalar and an empty tensor...
  const fs::path path = test::temp_dir() / "base.safetensors";
  const std::vector<float> v = {1.0f, -2.0f, 0.5f, 3.0f, 1e-3f, 7.0f};
  const std::vector<TensorToWrite> ts = {
      {"w", {2, 3}, v.data()}, {"s", {}, v.data()}, {"e", {0, 3}, nullptr}};
  std::vector<std::string> bases;
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<TensorToWrite> named = ts;
    for (auto& t : named) t.name += std::string(dtype_name(dt));
    write_safetensors(path, named, dt, {{"format", "pt"}});
    bases.push_back(read_file(path));
  }
  // ...and the seeds that parse.
  for (const std::string& seed : corpus()) {
    Tally t;
    run_one(seed, "seed", t);
    if (t.parsed == 1) bases.push_back(seed);
  }
  Tally tally;
  for (size_t i = 0; i < bases.size(); ++i) mutate_and_run(bases[i], 1000 + i, 1000, tally);
  // Both outcomes are exercised, so the mutations reach past the first checks.
  EXPECT_GT(tally.parsed, 100);
  EXPECT_GT(tally.rejected, 1000);
  std::cout << "parsed " << tally.parsed << ", rejected " << tally.rejected << "\n";
}

}  // namespace
}  // namespace kiln
