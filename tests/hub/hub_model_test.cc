// A model named by its hub id wherever kiln takes a model (docs/hub.md): model.path in a recipe,
// --model and --adapter, init --tokenizer; read from the Hugging Face cache with no network
// (HF_HUB_OFFLINE=1, the fake hub gone), a local directory of that name first, one line when it
// is in neither, and a recipe's model.download: true fetching it on first use. A LoRA run on a
// hub base names the base by its id in adapter_config.json (as PEFT and vLLM look it up) and in
// the effective recipe, with the commit it read.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/kiln_split.h"
#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "common/tiny_run.h"
#include "hub/fake_hub.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::CmdResult;
using testing::FakeHub;
using testing::SplitResult;
using testing::TempDir;

const std::string kData = std::string(KILN_SOURCE_DIR) + "/assets/demo/tokens.jsonl";

// `kiln <args>` with this test's cache and no token; stderr apart.
SplitResult kiln_in(const TempDir& d, const std::string& env, const std::string& args) {
  const fs::path err = d / "stderr";
  const CmdResult r = testing::run_shell(
      "env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_HUB_OFFLINE HF_HOME=" +
      (d / "hf_home").string() + " HF_HUB_CACHE=" + (d / "cache").string() + " " + env + " " +
      testing::kiln_binary() + " " + args + " 2> " + err.string());
  return {r.code, r.out, read_file(err)};
}

std::string lora_recipe(const std::string& model_path, const fs::path& out) {
  return "model:\n  path: " + model_path + "\ndata:\n  train: " + kData +
         "\n  seq_len: 64\nlora:\n  rank: 4\n  alpha: 8\n"
         "train:\n  max_steps: 3\n  micro_batch_size: 2\n  log_every: 3\n"
         "output:\n  dir: " +
         out.string() + "\n";
}

// The tiny model served as kiln-test/tiny, with the demo tokenizer beside it; downloaded into
// d/cache, after which the hub is gone.
fs::path download_tiny(const TempDir& d) {
  const fs::path model = testing::init_tiny_model(d.path(), 2);
  fs::copy_file(fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/demo/tokenizer.json",
                model / "tokenizer.json");
  FakeHub hub(model, d.path(), "kiln-test/tiny");
  const SplitResult r = kiln_in(d, "HF_ENDPOINT=" + hub.endpoint(), "download kiln-test/tiny");
  EXPECT_EQ(r.code, 0) << r.err;
  return model;
}

TEST(HubModel, ALoraRunOnAHubIdNamesItsBaseByTheId) {
  TempDir d("hubmodel");
  download_tiny(d);
  write_file_atomic(d / "recipe.yaml", lora_recipe("kiln-test/tiny", d / "run"));
  const SplitResult train = kiln_in(d, "HF_HUB_OFFLINE=1", "train " + (d / "recipe.yaml").string());
  ASSERT_EQ(train.code, 0) << train.out << train.err;
  const Json adapter = read_json_file(d / "run/final/adapter_config.json");
  EXPECT_EQ(adapter["base_model_name_or_path"], "kiln-test/tiny");
  const std::string effective = read_file(d / "run/recipe.yaml");
  const fs::path snapshots = d / "cache/models--kiln-test--tiny/snapshots";
  const std::string commit = fs::directory_iterator(snapshots)->path().filename().string();
  EXPECT_NE(effective.find("path: \"kiln-test/tiny\""), std::string::npos) << effective;
  EXPECT_NE(effective.find("revision: \"" + commit + "\""), std::string::npos) << effective;
  // --model and --adapter by id and by path, offline.
  const SplitResult eval = kiln_in(
      d, "HF_HUB_OFFLINE=1",
      "eval --model kiln-test/tiny --adapter " + (d / "run/final").string() + " --data " + kData);
  EXPECT_EQ(eval.code, 0) << eval.err;
}

TEST(HubModel, CommandsTakeAnIdAndSayTheRuleWhenItIsNowhere) {
  TempDir d("hubmodel");
  download_tiny(d);
  EXPECT_EQ(kiln_in(d, "HF_HUB_OFFLINE=1", "eval --model kiln-test/tiny --data " + kData).code, 0);
  const SplitResult init = kiln_in(
      d, "HF_HUB_OFFLINE=1",
      "init --config tiny --seed 1 --tokenizer kiln-test/tiny --out " + (d / "fitted").string());
  EXPECT_EQ(init.code, 0) << init.err;
  EXPECT_EQ(read_file(d / "fitted/tokenizer.json"),
            read_file(fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/demo/tokenizer.json"));
  testing::expect_one_line_error(
      kiln_in(d, "", "eval --model kiln-test/other --data " + kData),
      "'kiln-test/other' is neither a local directory nor in the Hugging Face cache");
  write_file_atomic(d / "other.yaml", lora_recipe("kiln-test/other", d / "run"));
  testing::expect_one_line_error(kiln_in(d, "", "plan " + (d / "other.yaml").string()),
                                 "model.path: 'kiln-test/other' is neither a local directory");
  // A directory of that name beside the recipe wins over the cache.
  fs::create_directories(d / "kiln-test");
  testing::init_tiny_model(d / "kiln-test", 3);
  fs::rename(d / "kiln-test/init", d / "kiln-test/other");
  EXPECT_EQ(kiln_in(d, "", "plan " + (d / "other.yaml").string()).code, 0);
}

TEST(HubModel, ARecipeMayDownloadOnFirstUse) {
  TempDir d("hubmodel");
  const fs::path model = testing::init_tiny_model(d.path(), 2);
  FakeHub hub(model, d.path(), "kiln-test/tiny");
  write_file_atomic(d / "recipe.yaml", lora_recipe("kiln-test/tiny", d / "run"));
  const std::string env = "HF_ENDPOINT=" + hub.endpoint();
  testing::expect_one_line_error(kiln_in(d, env, "plan " + (d / "recipe.yaml").string()),
                                 "run `kiln download kiln-test/tiny@main` first");
  const SplitResult plan =
      kiln_in(d, env, "plan " + (d / "recipe.yaml").string() + " model.download=true");
  EXPECT_EQ(plan.code, 0) << plan.err;
  EXPECT_TRUE(fs::exists(d / "cache/models--kiln-test--tiny/refs/main"));
}

}  // namespace
}  // namespace kiln
