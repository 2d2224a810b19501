// fp32 training follows the code before the backend seam (issue 11): a small 2-worker
// full_shard run (accumulation 2, clipping, cosine schedule, AdamW with decay) must end with the
// final weights recorded in tests/fixtures/fp32_run/ by main e8b25f3, to 1e-5 relative L2, and
// with its losses to 1e-6 relative.
//
// The seam itself kept these bit-identical on the machine kind that recorded them. Bit-identity
// with that binary ended on purpose when one product replaced the separate q, k, v products and
// the gate and up ones: their input gradient now sums over one longer inner dimension, which
// rounds differently. Bit-identity between kiln runs (kill and resume, resharding, async
// backends) is tested elsewhere and is unaffected.
//
// Regenerate (only with the pre-change binary, never to paper over a difference):
//   KILN_WRITE_FP32_FIXTURE=1 build/tests/launch/fp32_fixture_test
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "common/run_kiln.h"
#include "common/run_losses.h"
#include "common/tiny_run.h"
#include "common/weight_diff.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"

namespace kiln {
namespace {

using testing::run_kiln;
using testing::run_losses;

const fs::path kFixtureDir = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/fp32_run";

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "?";
}

// The machine kind bit-identity is defined for: CPU model and the OpenBLAS core kiln runs.
std::string machine_key() {
  auto r = run_kiln("doctor --json");
  std::string core = "?";
  try {
    const size_t brace = r.out.find('{');
    const Json j = parse_json(r.out.substr(brace), "doctor --json");
    core = j.at("cpu").value("blas_core", Json("?")).dump();
  } catch (const std::exception&) {
  }
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  return cpu_model() + " | blas " + core + " | OPENBLAS_CORETYPE=" + (forced ? forced : "");
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// FNV-1a over every tensor's name and f32 bits, in name order.
std::string weights_hash(const fs::path& model_dir) {
  CheckpointReader r(model_dir);
  uint64_t h = 1469598103934665603ull;
  for (const auto& name : r.names()) {
    std::vector<float> x(r.info(name).numel());
    r.read_f32(name, r.info(name).shape, x.data());
    h = fnv1a(name.data(), name.size(), h);
    h = fnv1a(x.data(), x.size() * sizeof(float), h);
  }
  return fmt::format("{:016x}", h);
}

fs::path run_fixture_recipe(const std::string& extra_env) {
  const fs::path d = testing::write_tiny_run(
      "kiln_fp32_fixture", "run", 3,
      "optimizer:\n  lr: 3.0e-3\n  weight_decay: 0.1\n"
      "schedule:\n  name: cosine\n  warmup_steps: 3\n"
      "train:\n  max_steps: 12\n  micro_batch_size: 2\n  grad_accum_steps: 2\n"
      "  grad_clip: 0.5\n  log_every: 12\n"
      "dist:\n  strategy: full_shard\n  nproc_per_node: 2\n  timeout_s: 60\n"
      "  threads_per_worker: 1\n");
  const auto r = run_kiln(
      "train " + (d / "recipe.yaml").string() + " output.dir=" + (d / "run").string(), extra_env);
  EXPECT_EQ(r.code, 0) << r.out;
  return d / "run";
}

void expect_matches_fixture(const fs::path& run, const std::string& how) {
  const Json fx = read_json_file(kFixtureDir / "fixture.json");
  const auto want_losses = fx.at("losses").get<std::vector<double>>();
  const auto got_losses = run_losses(run);
  ASSERT_EQ(got_losses.size(), want_losses.size()) << how;
  std::printf("fp32 fixture made on '%s'; this machine is '%s'\n",
              fx.at("machine").get<std::string>().c_str(), machine_key().c_str());
  double worst_loss = 0;
  for (size_t i = 0; i < want_losses.size(); ++i) {
    EXPECT_NEAR(got_losses[i], want_losses[i], 1e-6 * std::fabs(want_losses[i]))
        << how << " step " << i + 1;
    worst_loss = std::max(worst_loss, std::fabs(got_losses[i] / want_losses[i] - 1));
  }
  double d2 = 0, x2 = 0;
  for (const auto& [name, s] :
       testing::squared_diffs(kFixtureDir / "final.safetensors", run / "final")) {
    d2 += s.d2;
    x2 += s.x2;
  }
  std::printf("%s: losses within %.2e relative, final weights within %.2e relative L2\n",
              how.c_str(), worst_loss, std::sqrt(d2 / x2));
  EXPECT_LT(std::sqrt(d2 / x2), 1e-5) << how;
}

TEST(Fp32Fixture, TwoWorkerRunFollowsTheRecordedOne) {
  const fs::path run = run_fixture_recipe("");
  if (std::getenv("KILN_WRITE_FP32_FIXTURE") != nullptr) {
    fs::create_directories(kFixtureDir);
    fs::copy_file(run / "final/model.safetensors", kFixtureDir / "final.safetensors",
                  fs::copy_options::overwrite_existing);
    const Json fx{{"machine", machine_key()},
                  {"weights_hash", weights_hash(run / "final")},
                  {"losses", run_losses(run)},
                  {"made_by", "main e8b25f3, before the backend seam"}};
    write_file_atomic(kFixtureDir / "fixture.json", fx.dump(2) + "\n");
    GTEST_SKIP() << "wrote " << kFixtureDir;
  }
  expect_matches_fixture(run, "synchronous backend");
}

}  // namespace
}  // namespace kiln
