// Proving the stack end to end with the real binary: `kiln doctor` on this machine, `kiln bench
// comm` across two local workers, and the transport record and check at training start
// (run_meta.json, dist.require_transport).
#include <gtest/gtest.h>

#include <sstream>

#include "common/run_kiln.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

using testing::run_kiln;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(DoctorCli, ThisMachinePassesTheCpuPath) {
  auto r = run_kiln("doctor --require transport=gloo-tcp");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "ok    gloo    2-rank group over gloo-tcp ");
  EXPECT_HAS(r.out, "ok    require transport=gloo-tcp: gloo-tcp ");
  EXPECT_HAS(r.out, "doctor: ok (0 failure(s)");
}

TEST(DoctorCli, JsonIsOneObject) {
  // stdout only: the JSON document alone.
  const testing::CmdResult r =
      testing::run_shell(testing::kiln_binary() + " doctor --json 2>/dev/null");
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string& out = r.out;
  const Json j = parse_json(out, "kiln doctor --json");
  EXPECT_TRUE(j.at("ok").get<bool>());
  EXPECT_TRUE(j.at("gloo").at("ok").get<bool>());
  EXPECT_GT(j.at("cpu").at("logical_cpus").get<int>(), 0);
}

TEST(DoctorCli, UnmetRequirementFailsWithOneLine) {
  auto r = run_kiln("doctor --require transport=efa");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "\nkiln: error: doctor: --require transport=efa not met: no EFA device");
  r = run_kiln("doctor --require gpus=9999 --require transport=efa");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.out, "kiln: error: doctor: --require gpus=9999 not met: ");
  EXPECT_HAS(r.out, "(and 1 more failure(s) above)");
  r = run_kiln("doctor --require warp=9");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.out, "kiln: error: --require 'warp=9': unknown requirement");
  // A broken interface setting breaks group formation: a failed check, not just a warning.
  r = run_kiln("doctor", "KILN_SOCKET_IFNAME=nosuchif0");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: doctor: gloo: cannot form a 2-rank Gloo group on this host");
}

TEST(BenchComm, TwoWorkersNoWrongElements) {
  auto r = run_kiln("bench comm --nproc 2 --max-bytes 64KiB --iters 2 --warmup 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "# kiln bench comm: 2 rank(s) over gloo-tcp lo 127.0.0.1 shm, f32");
  for (const char* op : {"# all_reduce (sum)", "# all_gather", "# reduce_scatter (sum)"}) {
    EXPECT_HAS(r.out, op);
  }
  // Rows from 1 KiB to 64 KiB for each op: size, count, type, time, algbw, busbw, #wrong 0.
  int rows = 0;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line.substr(line.find(']') + 1));
    uint64_t size = 0, count = 0;
    std::string type;
    double time = 0, algbw = 0, busbw = 0;
    long long wrong = -1;
    if (!(f >> size >> count >> type >> time >> algbw >> busbw >> wrong)) continue;
    ++rows;
    EXPECT_EQ(wrong, 0) << line;
    EXPECT_EQ(type, "f32");
    EXPECT_EQ(size, count * 4) << line;
    EXPECT_GT(time, 0);
    EXPECT_GE(busbw, 0);
  }
  EXPECT_EQ(rows, 3 * 7) << r.out;
}

TEST(BenchComm, Bf16AndTheBusbwFloor) {
  auto r = run_kiln(
      "bench comm --nproc 2 --max-bytes 4KiB --iters 1 --warmup 0 --dtype bf16 --ops all_reduce "
      "--expect-busbw 1000000");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "bf16");
  EXPECT_HAS(r.out, "kiln: error: bench comm: all_reduce busbw ");
  EXPECT_HAS(r.out, "at 4 KiB is below --expect-busbw 1000000");
  r = run_kiln("bench comm --min-bytes 1XB");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "--min-bytes '1XB': unknown unit");
}

fs::path setup_run(const std::string& name) {
  return testing::setup_tiny_run(
      "kiln_stack", name, {.seq_len = 32, .max_steps = 2, .micro_batch_size = 1, .timeout_s = 30});
}

TEST(RequireTransport, EfaFailsBeforeStepOneNamingTheTransport) {
  const fs::path d = setup_run("efa");
  auto r = run_kiln("train " + (d / "recipe.yaml").string() + " dist.require_transport=efa");
  EXPECT_NE(r.code, 0) << r.out;
  // Every rank checks; whichever fails first stops the group.
  EXPECT_HAS(r.out,
             "] kiln: error: dist.require_transport=efa but rank 0 uses gloo-tcp lo "
             "127.0.0.1");
  EXPECT_EQ(r.out.find("step 1/2"), std::string::npos) << r.out;
  // What was in use is on record all the same.
  const Json meta = read_json_file(d / "run/run_meta.json");
  EXPECT_EQ(meta.at("require_transport"), "efa");
  EXPECT_EQ(meta.at("transport"), "gloo-tcp lo 127.0.0.1 shm");
}

TEST(RequireTransport, GlooTcpPassesAndRunMetaRecordsIt) {
  const fs::path d = setup_run("gloo");
  auto r = run_kiln("train " + (d / "recipe.yaml").string() + " dist.require_transport=gloo-tcp");
  ASSERT_EQ(r.code, 0) << r.out;
  // Both ranks on this host: bulk collectives go through shared memory (shm_lane.h).
  EXPECT_HAS(r.out, "transport: gloo-tcp lo 127.0.0.1 shm (rank 0); 2 rank(s)");
  const Json meta = read_json_file(d / "run/run_meta.json");
  EXPECT_EQ(meta.at("world_size"), 2);
  EXPECT_EQ(meta.at("strategy"), "full_shard");
  EXPECT_EQ(meta.at("transport"), "gloo-tcp lo 127.0.0.1 shm");
  EXPECT_EQ(meta.at("transports"),
            Json({"gloo-tcp lo 127.0.0.1 shm", "gloo-tcp lo 127.0.0.1 shm"}));
  EXPECT_EQ(meta.at("require_transport"), "gloo-tcp");
  EXPECT_EQ(meta.at("topology_source"), "default");
  EXPECT_EQ(meta.at("launcher"), "kiln-agent");
  EXPECT_FALSE(meta.at("kiln_version").get<std::string>().empty());
  EXPECT_TRUE(meta.at("started_at").get<std::string>().ends_with("Z"));
}

}  // namespace
}  // namespace kiln
