// Runs a libFuzzer entry point (fuzz/*_fuzz.cc, linked into a test) in the ordinary gcc suite:
// the seeds of its corpus, deterministic byte mutations of them, and run_fuzz_input, which fails
// the test when anything escapes the entry point. The entry point itself aborts when a parsed
// input breaks its invariants, which fails the test binary.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kiln::testing {

// How many inputs the parser loaded and how many it rejected (a test checks both happen).
struct FuzzTally {
  int loaded = 0;
  int rejected = 0;
};

// The parser itself, run after the entry point to count the input: true when it loads, false or
// kiln::Error when it is rejected.
using FuzzLoad = std::function<bool(const std::string&)>;

// Runs the entry point over an exact-size heap copy of `input` (a sanitizer build then catches
// a read past its end), then `load` when given, counting into `tally`. A kiln::Error from `load`
// must be one line; any other exception, from either, fails the test, naming `label`.
inline void run_fuzz_input(const std::string& input, const std::string& label,
                           FuzzTally* tally = nullptr, const FuzzLoad& load = nullptr) {
  const std::vector<uint8_t> buf(input.begin(), input.end());
  try {
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
    if (!load) return;
    const bool loaded = load(input);
    if (tally != nullptr) ++(loaded ? tally->loaded : tally->rejected);
  } catch (const Error& e) {
    if (!load) {
      ADD_FAILURE() << label << ": kiln::Error escaped the entry point: " << e.what();
      return;
    }
    if (tally != nullptr) ++tally->rejected;
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << label << ": multi-line error: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": an exception escaped: " << e.what() << "\ninput:\n" << input;
  } catch (...) {
    ADD_FAILURE() << label << ": an unknown exception escaped";
  }
}

// The regular files of a seed corpus, in name order.
inline std::vector<std::string> fuzz_seeds(const fs::path& dir) {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(read_file(p));
  return out;
}

// Prefixes of `s`, from empty to whole: every length, or (sparse) lengths growing by an eighth.
inline std::vector<std::string> fuzz_truncations(const std::string& s, bool sparse = false) {
  std::vector<std::string> out;
  for (size_t n = 0; n <= s.size(); n += sparse ? 1 + n / 8 : 1) out.push_back(s.substr(0, n));
  return out;
}

// `s` with one to four edits, each of a random kind: a bit flipped, a byte set to any value or
// to one of `alphabet` (the format's syntax), a few bytes deleted, or a slice of it duplicated.
inline std::string fuzz_mutate(std::string s, std::mt19937_64& rng, std::string_view alphabet) {
  for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
    if (s.empty()) s.push_back(alphabet.empty() ? ' ' : alphabet[0]);
    const size_t at = rng() % s.size();
    switch (rng() % 5) {
      case 0:
        s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
        break;
      case 1:
        s[at] = static_cast<char>(rng() % 256);
        break;
      case 2:
        if (!alphabet.empty()) s[at] = alphabet[rng() % alphabet.size()];
        break;
      case 3:
        s.erase(at, 1 + rng() % 8);
        break;
      default:
        s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 16));
        break;
    }
  }
  return s;
}

}  // namespace kiln::testing
