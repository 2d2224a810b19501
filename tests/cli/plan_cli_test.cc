// `kiln plan`: the JSON object is the library's plan for the recipe's rank 0 (a counting run of
// the real code) and its parts add up to peak_bytes; text and settings that fit; bad input fails in
// one line naming the field.
#include <gtest/gtest.h>

#include "common/kiln_split.h"
#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/model/config.h"
#include "kiln/model/lora_config.h"
#include "kiln/train/memory_plan.h"
#include "kiln/train/recipe.h"

namespace kiln {
namespace {

using testing::run_kiln;

fs::path temp_dir() { return testing::fresh_dir("kiln_plan_cli"); }

// A recipe whose model is `model` (a preset name or a directory), without data.train: planning
// reads no data.
fs::path write_recipe(const fs::path& dir, const std::string& model) {
  const fs::path p = dir / "recipe.yaml";
  write_file_atomic(p, "model: {path: " + model + "}\n" +
                           "data: {seq_len: 128}\n"
                           "train: {micro_batch_size: 2, dtype: bf16}\n"
                           "output: {dir: " +
                           (dir / "run").string() + "}\n");
  return p;
}

// stdout alone is the JSON object: stderr may carry warnings (bf16 products falling back to fp32
// on a CPU without AVX512_BF16, say).
Json plan_json(const std::string& args) {
  const auto r = testing::run_kiln_split("plan " + args + " --json",
                                         testing::fresh_dir("kiln_plan_cli_streams"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  return Json::parse(r.out);
}

TEST(PlanCli, JsonIsTheLibrarysPlanAndItsPartsAddUp) {
  const fs::path dir = temp_dir();
  const fs::path recipe = write_recipe(dir, "25m");
  const Json j =
      plan_json(recipe.string() + " dist.nproc_per_node=2 train.activation_checkpointing=true");
  const Recipe r = load_recipe(
      recipe, {"dist.nproc_per_node=2", "train.activation_checkpointing=true"}, RecipeUse::kPlan);
  const MemoryPlan p = plan_memory(preset_config("25m"), memory_settings(r, 2, 2, true));
  EXPECT_EQ(j.at("peak_bytes").get<size_t>(), p.peak);
  EXPECT_EQ(j.at("world_size").get<int>(), 2);
  EXPECT_EQ(j.at("activations_bytes").get<size_t>(), p.activations_recompute);
  EXPECT_LT(j.at("activations_recompute_bytes").get<size_t>(),
            j.at("activations_full_bytes").get<size_t>());
  EXPECT_EQ(j.at("largest_gathered_unit").get<std::string>(), "embed");
  size_t pool = 0, sum = 0;
  for (const char* k : {"gathered_bytes", "grad_buffer_bytes", "comm_bytes"}) {
    pool += j.at(k).get<size_t>();
  }
  for (const char* k :
       {"baseline_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "comm_scratch_bytes",
        "activations_bytes", "workspace_bytes", "snapshot_bytes", "other_bytes"}) {
    sum += j.at(k).get<size_t>();
  }
  EXPECT_EQ(j.at("peak_bytes").get<size_t>(),
            sum + std::max(pool, j.at("final_save_bytes").get<size_t>()));
  // Sharding halves the state: twice the ranks, half the params.
  const Json four = plan_json(recipe.string() + " dist.nproc_per_node=4");
  EXPECT_LT(four.at("params_bytes").get<size_t>(), j.at("params_bytes").get<size_t>());
  ASSERT_TRUE(j.at("settings").is_array());
  EXPECT_EQ(j.at("settings").size(), 6u);  // 3 strategies x recomputation off/on
}

TEST(PlanCli, ReadsAModelDirectoryAndSaysWhatFits) {
  const fs::path dir = temp_dir();
  ASSERT_EQ(run_kiln("init --config tiny --out " + (dir / "m").string()).code, 0);
  const fs::path recipe = write_recipe(dir, (dir / "m").string());
  const Json from_dir = plan_json(recipe.string());
  const Json from_preset = plan_json(write_recipe(dir, "tiny").string());
  EXPECT_EQ(from_dir.at("peak_bytes"), from_preset.at("peak_bytes"));

  // A plan that does not fit exits 3 (after printing it), so scripts can gate a run on it.
  auto r = run_kiln("plan " + recipe.string() + " --memory-per-device 1MiB");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("predicted peak"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does NOT fit"), std::string::npos) << r.out;
  r = run_kiln("plan " + recipe.string() + " --memory-per-device 64GiB");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(": fits"), std::string::npos) << r.out;
  EXPECT_TRUE(plan_json(recipe.string() + " --memory-per-device 64GiB").at("fits").get<bool>());
}

// A LoRA run's few trainable parameters are counted in a unit that shows them ("15.4K train"),
// not rounded to "0.0M".
TEST(PlanCli, SmallTrainableCountsShow) {
  const fs::path dir = temp_dir();
  const fs::path recipe = write_recipe(dir, "tiny");
  const auto r = run_kiln("plan " + recipe.string() + " lora.rank=2");
  ASSERT_EQ(r.code, 0) << r.out;
  const Recipe rec = load_recipe(recipe, {"lora.rank=2"}, RecipeUse::kPlan);
  const int64_t n = lora_parameter_count(preset_config("tiny"), *rec.lora);
  ASSERT_TRUE(n >= 1000 && n < 1000000) << n;
  EXPECT_NE(r.out.find(fmt::format(": {:.1f}K train", static_cast<double>(n) / 1e3)),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("0.0M"), std::string::npos) << r.out;
}

// A plan for GPUs names the CUDA context and, between ranks, NCCL's buffers, each with its
// source, per device; a CPU plan has neither.
TEST(PlanCli, GpuPlanNamesTheCudaContextAndNcclBuffers) {
  const fs::path dir = temp_dir();
  const fs::path recipe = write_recipe(dir, "25m");
  const Json cpu = plan_json(recipe.string() + " dist.nproc_per_node=2 --device cpu");
  EXPECT_FALSE(cpu.contains("cuda_context_bytes"));
  EXPECT_FALSE(cpu.contains("nccl_buffers_bytes"));
  const Json one = plan_json(recipe.string() + " --device cuda");
  EXPECT_GT(one.at("cuda_context_bytes").get<size_t>(), 0u);
  EXPECT_FALSE(one.contains("nccl_buffers_bytes"));  // one process: no NCCL
  const Json two = plan_json(recipe.string() + " dist.nproc_per_node=2 --device cuda");
  EXPECT_GT(two.at("nccl_buffers_bytes").get<size_t>(), 0u);
  EXPECT_EQ(two.at("peak_bytes").get<size_t>(), two.at("device_peak_bytes").get<size_t>() +
                                                    two.at("cuda_context_bytes").get<size_t>() +
                                                    two.at("nccl_buffers_bytes").get<size_t>());
  const auto text = run_kiln("plan " + recipe.string() + " dist.nproc_per_node=2 --device cuda");
  EXPECT_EQ(text.code, 0) << text.out;
  for (const char* want : {"CUDA context", "NCCL buffers", "channels", "NCCL 2.28"}) {
    EXPECT_NE(text.out.find(want), std::string::npos) << want << "\n" << text.out;
  }
  EXPECT_EQ(run_kiln("plan " + recipe.string() + " --device cpu").out.find("CUDA context"),
            std::string::npos);
}

TEST(PlanCli, BadInputNamesTheField) {
  const fs::path dir = temp_dir();
  const std::string recipe = write_recipe(dir, "25m").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {recipe + " --memory-per-device 12XB", "--memory-per-device"},
      {recipe + " --memory-per-device -1GiB", "--memory-per-device"},
      {recipe + " model.path=" + (dir / "nope").string(), "model.path"},
      {recipe + " dist.nproc_per_node=2 dist.strategy=bogus", "dist.strategy"},
      {recipe + " train.micro_batch_size=0", "train.micro_batch_size"},
      {recipe + " train.no_such_key=1", "train.no_such_key"},
      {recipe + " --device tpu", "--device"},
  };
  for (const auto& [args, field] : cases) {
    const auto r = run_kiln("plan " + args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.out.find(field), std::string::npos) << args << ": " << r.out;
    EXPECT_NE(r.out.find("error"), std::string::npos) << r.out;
  }
}

// A budget past 64 bits is refused in one line naming the flag, before any plan is printed (it
// used to wrap around).
TEST(PlanCli, AHugeBudgetIsRefused) {
  const fs::path dir = temp_dir();
  const std::string recipe = write_recipe(dir, "tiny").string();
  const auto r = run_kiln("plan " + recipe + " --memory-per-device 99999999999999999999GiB");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out,
            "kiln: error: --memory-per-device: '99999999999999999999GiB' is more than a 64-bit "
            "byte count holds (at most 16 EiB)\n");
}

}  // namespace
}  // namespace kiln
