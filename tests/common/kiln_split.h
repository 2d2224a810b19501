// Runs the kiln binary with stdout and stderr apart (and a given stdin), for the CLI tests that
// check what each stream holds, and the check of a bad-input failure: one line on stderr.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "common/run_kiln.h"
#include "kiln/base/file.h"

namespace kiln::testing {

struct SplitResult {
  int code;
  std::string out, err;
};

// `kiln <args>` with `input` on stdin; stdin and stderr pass through files in `scratch`.
inline SplitResult run_kiln_split(const std::string& args, const std::filesystem::path& scratch,
                                  const std::string& input = "") {
  const std::filesystem::path in = scratch / "stdin", err = scratch / "stderr";
  write_file_atomic(in, input);
  const CmdResult r =
      run_shell(kiln_binary() + " " + args + " < '" + in.string() + "' 2> '" + err.string() + "'");
  return {r.code, r.out, read_file(err)};
}

// A non-zero exit and exactly one line on stderr, "kiln: error: ..." naming `needle`.
inline void expect_one_line_error(const SplitResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_EQ(r.err.rfind("kiln: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in " << r.err;
}

}  // namespace kiln::testing
