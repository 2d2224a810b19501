// `kiln bench train` end to end on the tiny preset: one row per recompute mode, each from its own
// child process, with the figures' columns filled; clear errors for bad options. Never judges
// speed.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/run_kiln.h"

namespace kiln {
namespace {

using testing::run_kiln;

// Table rows of the output: lines whose third field is BxT ("1x32").
std::vector<std::vector<std::string>> rows_of(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream is(out);
  std::string line;
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    if (f.size() >= 13 && f[2].find('x') != std::string::npos && f[2] != "BxT") rows.push_back(f);
  }
  return rows;
}

TEST(BenchCli, TrainPrintsOneRowPerRecomputeMode) {
  const auto r = run_kiln("bench train --preset tiny --batch 1 --seq 32 --steps 1 --warmup 1",
                          "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("measured peak fp32"), std::string::npos) << r.out;
  const auto rows = rows_of(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0][0], "tiny");
  EXPECT_EQ(rows[0][2], "1x32");
  EXPECT_EQ(rows[0][3], "fp32");
  EXPECT_EQ(rows[0][4], "off");
  EXPECT_EQ(rows[1][4], "on");
  for (const auto& f : rows) {
    EXPECT_GT(std::stod(f[5]), 0.0) << "step_s";
    EXPECT_GT(std::stod(f[6]), 0.0) << "tokens/s";
    EXPECT_GT(std::stod(f[9]), 0.0) << "peak RSS";
    EXPECT_GT(std::stod(f[10]), 0.0) << "estimate";
  }
}

// --list prints the rows a run would take (bench/compare_train.sh reads them) and measures nothing.
TEST(BenchCli, TrainListPrintsTheRowsWithoutRunningThem) {
  auto r = run_kiln("bench train --list");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("measured peak"), std::string::npos) << r.out;
  EXPECT_EQ(r.out,
            "bench-h64 1 256 20 3\nbench-h64 4 256 10 2\n25m 1 256 5 2\nbench-h512 1 256 4 1\n"
            "bench-h512 4 512 3 1\nqwen2.5-0.5b 1 256 3 1\nqwen2.5-0.5b 1 512 3 1\n");
  r = run_kiln("bench train --list --quick --steps 7");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "bench-h64 1 256 7 2\n25m 1 256 7 1\n");
  r = run_kiln("bench train --list --preset tiny --batch 2 --seq 64");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "tiny 2 64 5 2\n");
}

TEST(BenchCli, TrainRejectsBadOptions) {
  auto r = run_kiln("bench train --preset no-such-shape --steps 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("unknown preset 'no-such-shape'"), std::string::npos) << r.out;
  r = run_kiln("bench train --preset tiny --recompute sometimes");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--recompute must be off, on or both"), std::string::npos) << r.out;
  r = run_kiln("bench train --preset tiny --dtype fp8");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--dtype must be fp32 or bf16"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
