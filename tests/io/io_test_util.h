// Helpers shared by the io tests: unique temporary directories, raw safetensors bytes, and
// checks that an operation fails with a one-line kiln::Error naming what it should.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"

namespace kiln::test {

// A fresh directory per test (and per process, so parallel ctest runs never collide).
inline fs::path temp_dir() { return testing::fresh_dir("kiln_io_test"); }

// [u64 little-endian header length][header][data]; `header_len` overrides the length field.
inline std::string raw_safetensors(std::string_view header, std::string_view data,
                                   uint64_t header_len = UINT64_MAX) {
  const uint64_t n = header_len == UINT64_MAX ? header.size() : header_len;
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  out.append(header);
  out.append(data);
  return out;
}

// Runs `f`, expecting a kiln::Error whose single-line message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
    ADD_FAILURE() << "expected a kiln::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (std::string_view p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nlacks: " << p;
    }
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message spans lines: " << msg;
  }
}

}  // namespace kiln::test
