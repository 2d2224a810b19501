// `kiln bench train` end to end on the tiny preset: one row per recompute mode, each from its own
// child process, with the figures' columns filled; clear errors for bad options. Never judges
// speed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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
  // Before each row: the first step's loss beside ln(vocabulary), and each phase's time, FLOPs
  // and bytes; the row itself stays the last line (bench/compare_train.sh takes `tail -1`).
  std::istringstream is(r.out);
  std::vector<std::string> losses, phases;
  std::string line, last;
  while (std::getline(is, line)) {
    if (line.rfind("  first_loss ", 0) == 0) losses.push_back(line);
    if (line.rfind("  phase ", 0) == 0) phases.push_back(line);
    if (!line.empty()) last = line;
  }
  ASSERT_EQ(losses.size(), 2u) << r.out;
  double loss = 0, ln_v = 0;
  ASSERT_EQ(std::sscanf(losses[0].c_str(), "  first_loss %lf ln_vocab %lf", &loss, &ln_v), 2);
  EXPECT_NEAR(ln_v, std::log(1024.0), 1e-4);  // tiny's vocabulary
  EXPECT_NEAR(loss, ln_v, 0.2 * ln_v) << "a random model's loss is near ln(V)";
  ASSERT_EQ(phases.size(), 10u) << r.out;  // five phases per row
  EXPECT_NE(phases[0].find("phase gemm"), std::string::npos) << phases[0];
  EXPECT_NE(phases[4].find("phase other"), std::string::npos) << phases[4];
  for (const auto& p : phases) {
    char name[32];
    double s = -1, flop = -1, bytes = -1;
    ASSERT_EQ(
        std::sscanf(p.c_str(), "  phase %31s %lf s %lf flop %lf bytes", name, &s, &flop, &bytes), 4)
        << p;
    EXPECT_GE(s, 0.0) << p;
    EXPECT_GT(flop, 0.0) << p;
    EXPECT_GT(bytes, 0.0) << p;
  }
  EXPECT_EQ(last.rfind("tiny ", 0), 0u) << "the last line is a row: " << last;
}

// --lora RANK: a LoRA step on a frozen base, in fp32 and bf16: the row's params column reads
// trainable/base and the line before it gives the trainable count (the adapters': r (in + out)
// per projection per layer), which is smaller than the base; the step's FLOPs are the LoRA
// step's, so its GFLOP/s x step time is below the full step's FLOPs.
TEST(BenchCli, TrainLoraRowSaysWhatTrains) {
  for (const std::string dtype : {"fp32", "bf16"}) {
    const auto r = run_kiln(
        "bench train --preset tiny --batch 1 --seq 32 --steps 1 --warmup 1 "
        "--recompute off --lora 4 --dtype " +
            dtype,
        "OMP_NUM_THREADS=1");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("LoRA rank 4 (all-linear, alpha 8, frozen base)"), std::string::npos)
        << r.out;
    const auto rows = rows_of(r.out);
    ASSERT_EQ(rows.size(), 1u) << r.out;
    EXPECT_EQ(rows[0][3], dtype);
    // tiny: hidden 64, intermediate 176, 2 layers, 4 heads of 16, 2 KV heads: Q 64, KV 32
    const long long C = 64, I = 176, Q = 64, KV = 32;
    const long long adapters = 2 * 4 * ((C + Q) + 2 * (C + KV) + (Q + C) + 2 * (C + I) + (I + C));
    const size_t at = r.out.find("  lora rank 4 alpha 8 all-linear: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    long long trained = 0, total = 0;
    ASSERT_EQ(
        std::sscanf(r.out.c_str() + at, "  lora rank 4 alpha 8 all-linear: %lld trainable of %lld",
                    &trained, &total),
        2)
        << r.out;
    EXPECT_EQ(trained, adapters);
    EXPECT_GT(total, 10 * trained);
    EXPECT_EQ(rows[0][1], fmt::format("{:.2f}M/{:.1f}M", trained / 1e6, (total - trained) / 1e6));
    // The frozen head's products are forward and dx only: 4 V C FLOPs per targeted row (31).
    const size_t head = r.out.find("  phase lm_head ");
    ASSERT_NE(head, std::string::npos) << r.out;
    double s = 0, flop = 0;
    ASSERT_EQ(std::sscanf(r.out.c_str() + head, "  phase lm_head %lf s %lf flop", &s, &flop), 2);
    EXPECT_NEAR(flop, 4.0 * 1024 * C * 31, 1e-3 * flop);
    EXPECT_GT(std::stod(rows[0][5]), 0.0) << "step_s";
    EXPECT_GT(std::stod(rows[0][7]), 0.0) << "GFLOP/s";
  }
  auto bad = run_kiln("bench train --preset tiny --lora -1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--lora must be a rank >= 1, or 0"), std::string::npos) << bad.out;
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

// kiln bench dpo: the three sides' medians and ratios, and with --lora each side's peak memory
// from --memory-rounds child processes each (every figure positive).
TEST(BenchCli, DpoPrintsTheSidesAndTheirRatios) {
  const auto r =
      run_kiln("bench dpo --preset tiny --pairs 1 --seq 16 --rounds 2 --lora 2 --memory-rounds 2");
  ASSERT_EQ(r.code, 0) << r.out;
  double sft = 0, live = 0, live_ratio = 0, pre = 0, pre_ratio = 0;
  const size_t at = r.out.find("step ms (median of 2): ");
  ASSERT_NE(at, std::string::npos) << r.out;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at,
                        "step ms (median of 2): sft %lf, dpo live reference %lf (%lfx), dpo "
                        "precomputed reference %lf (%lfx)",
                        &sft, &live, &live_ratio, &pre, &pre_ratio),
            5)
      << r.out;
  EXPECT_GT(sft, 0);
  EXPECT_NEAR(live_ratio, live / sft, 1e-2);
  EXPECT_NEAR(pre_ratio, pre / sft, 1e-2);
  double m_sft = 0, m_dpo = 0;
  const size_t mem = r.out.find("peak memory MiB");
  ASSERT_NE(mem, std::string::npos) << r.out;
  ASSERT_EQ(std::sscanf(r.out.c_str() + mem,
                        "peak memory MiB (median of 2 child processes): sft %lf, dpo %lf", &m_sft,
                        &m_dpo),
            2)
      << r.out;
  EXPECT_GT(m_sft, 0);
  EXPECT_GT(m_dpo, 0);
}

}  // namespace
}  // namespace kiln
