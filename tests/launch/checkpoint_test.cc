// Checkpoints end to end: exact resume, restarts after killed workers, resharding to another
// world size, export from a sharded checkpoint, and torn checkpoints ignored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>

#include "common/run_kiln.h"
#include "common/run_losses.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"

namespace kiln {
namespace {

using testing::run_kiln;
using testing::run_losses;
using testing::run_metric_rows;

fs::path make_run(const std::string& name, const std::string& extra = "",
                  const std::string& preset = "tiny") {
  const fs::path d = testing::fresh_dir("kiln_ckpt", name);
  testing::init_tiny_model(d, 2, preset);
  write_file_atomic(d / "recipe.yaml",
                    testing::tiny_recipe_head(d) +
                        "optimizer:\n  lr: 3.0e-3\nschedule:\n  name: cosine\n  warmup_steps: 4\n"
                        "train:\n  max_steps: 20\n  micro_batch_size: 4\n  log_every: 20\n"
                        "checkpoint:\n  every_steps: 5\n  keep_last: 0\n"
                        "dist:\n  timeout_s: 30\n  threads_per_worker: 1\n" +
                        extra);
  return d;
}

// Max |a - b| over every tensor of two HF directories.
double max_weight_diff(const fs::path& a, const fs::path& b) {
  CheckpointReader ra(a), rb(b);
  EXPECT_EQ(ra.names(), rb.names());
  double m = 0;
  for (const auto& name : ra.names()) {
    std::vector<float> x(ra.info(name).numel()), y(x.size());
    ra.read_f32(name, ra.info(name).shape, x.data());
    rb.read_f32(name, ra.info(name).shape, y.data());
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(double{x[i]} - y[i]));
  }
  return m;
}

// `train_args` into d/cut dies at the start of step 16 (rank 0), then continues with
// train.resume=auto: its losses are d/full's, bit for bit. Step 10 is committed by then (the
// step-15 save waits for it first); step 15 is written in the background and may or may not be
// committed yet: the run resumes from the newest committed one.
void expect_crash_and_resume_match(const fs::path& d, const std::string& train_args,
                                   const std::string& env) {
  const std::string out = " output.dir=" + (d / "cut").string();
  auto crash = run_kiln(train_args + out, env + " KILN_FAULT=0:16:exit");
  ASSERT_NE(crash.code, 0);
  EXPECT_TRUE(fs::exists(d / "cut/checkpoints/step-00000010/manifest.json"));
  auto resumed = run_kiln(train_args + out + " train.resume=auto", env);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("resumed from"), std::string::npos) << resumed.out;
  const auto a = run_losses(d / "full"), b = run_losses(d / "cut");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
}

// Resume and resharding for every family: tiny Qwen2, Qwen3 (q/k norms in the layer units),
// Llama (no biases, llama3 RoPE, untied head).
class CheckpointFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointFamily, ResumeIsBitIdenticalToAnUninterruptedRun) {
  const fs::path d = make_run("resume" + GetParam(), "", GetParam());
  const std::string recipe = (d / "recipe.yaml").string();
  auto full =
      run_kiln("train " + recipe + " output.dir=" + (d / "full").string(), "OMP_NUM_THREADS=1");
  ASSERT_EQ(full.code, 0) << full.out;
  expect_crash_and_resume_match(d, "train " + recipe, "OMP_NUM_THREADS=1");
  EXPECT_EQ(max_weight_diff(d / "full/final", d / "cut/final"), 0.0);
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// LoRA: rank-4 adapters on every projection of a frozen base.
constexpr const char* kLora = "lora:\n  rank: 4\n  alpha: 8\n";  // lr: the recipe's 3e-3

fs::path adapter_file(const fs::path& run) { return run / "final" / "adapter_model.safetensors"; }

// The loss `kiln eval --json` prints (its last line that is a JSON object) for `model_args`.
double eval_loss(const std::string& model_args) {
  const auto r = run_kiln("eval --json --data " + std::string(KILN_SOURCE_DIR) +
                          "/assets/demo/tokens.jsonl --seq-len 64 " + model_args);
  EXPECT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.rfind("\n{");
  const std::string line = r.out.substr(at == std::string::npos ? 0 : at + 1);
  return Json::parse(line.substr(0, line.find('\n'))).at("loss").get<double>();
}

// A LoRA run's checkpoints hold its adapters and their AdamW state only; a crash and a resume
// give the same losses and adapters, bit for bit, as a run that never stopped; and a 2-worker
// run's checkpoint continues on one process (resharded) as the 2-worker run does.
TEST(CheckpointLora, AdapterOnlyCheckpointsResumeExactlyAndReshard) {
  const fs::path d = make_run("lora_resume", kLora);
  const std::string recipe = (d / "recipe.yaml").string();
  auto full = run_kiln("train " + recipe + " dist.nproc_per_node=2 train.micro_batch_size=2 " +
                       "output.dir=" + (d / "full").string());
  ASSERT_EQ(full.code, 0) << full.out;
  EXPECT_NE(full.out.find("parameters train"), std::string::npos) << full.out;
  // The checkpoint: the base's units marked frozen, and no tensor of theirs in the shards.
  const fs::path step10 = d / "full/checkpoints/step-00000010";
  const Json manifest = read_json_file(step10 / "manifest.json");
  size_t frozen = 0, trains = 0, trained_numel = 0;
  for (const auto& u : manifest.at("units")) {
    const bool f = u.value("frozen", false);
    (f ? frozen : trains) += 1;
    if (!f) trained_numel += u.at("numel").get<size_t>();
    EXPECT_EQ(f, u.at("name").get<std::string>().find(".lora") == std::string::npos) << u.dump();
  }
  EXPECT_GT(frozen, 0u);
  EXPECT_GT(trains, 0u);
  size_t params = 0;
  for (const auto& f : manifest.at("files")) {
    const std::string name = f.at("name").get<std::string>();
    if (!name.starts_with("rank-")) continue;
    CheckpointReader shard(step10 / name);
    for (const auto& t : shard.names()) {
      EXPECT_TRUE(t.ends_with(".params") || t.ends_with(".m") || t.ends_with(".v")) << t;
      if (t.ends_with(".params")) params += shard.info(t).numel();
    }
  }
  EXPECT_EQ(params, trained_numel);  // the adapters, once (two shards of each unit)
  expect_crash_and_resume_match(
      d, "train " + recipe + " dist.nproc_per_node=2 train.micro_batch_size=2", "");
  const auto a = run_losses(d / "full");
  EXPECT_EQ(max_weight_diff(adapter_file(d / "full"), adapter_file(d / "cut")), 0.0);
  // Step 10 of the 2-worker run on one process.
  auto one = run_kiln("train " + recipe + " train.resume=" + step10.string() +
                      " output.dir=" + (d / "one").string());
  ASSERT_EQ(one.code, 0) << one.out;
  const auto c = run_losses(d / "one");
  ASSERT_EQ(c.size(), 10u);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], a[10 + i], 1e-5 * std::fabs(a[10 + i]));
  EXPECT_LT(max_weight_diff(adapter_file(d / "full"), adapter_file(d / "one")), 1e-4);
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// LoRA dropout across a crash: its masks are a function of the run's seed, the step, the
// micro-step and the rank (lora_micro_batch_seed), never of how many steps this process ran, so a
// run that dies at step 16 and resumes from step 10 or 15 draws every mask the uninterrupted run
// drew: the losses and the final adapters are the same, bit for bit. With gradient accumulation
// (two micro-steps per step, each its own masks); and dropout really acts (a run without it
// differs from step 2 on: fresh adapters have B = 0).
TEST(CheckpointLora, DropoutResumesExactlyWithAccumulation) {
  const fs::path d = make_run("lora_dropout", std::string(kLora) + "  dropout: 0.1\n");
  const std::string args = "train " + (d / "recipe.yaml").string() +
                           " train.grad_accum_steps=2 train.micro_batch_size=2";
  const std::string env = "OMP_NUM_THREADS=1";
  auto full = run_kiln(args + " output.dir=" + (d / "full").string(), env);
  ASSERT_EQ(full.code, 0) << full.out;
  expect_crash_and_resume_match(d, args, env);
  EXPECT_EQ(max_weight_diff(adapter_file(d / "full"), adapter_file(d / "cut")), 0.0);
  auto plain = run_kiln(args + " lora.dropout=0 output.dir=" + (d / "plain").string(), env);
  ASSERT_EQ(plain.code, 0) << plain.out;
  const auto with = run_losses(d / "full"), without = run_losses(d / "plain");
  ASSERT_EQ(without.size(), with.size());
  // Step 1's adapters have B = 0, so dropout cannot show before step 2.
  EXPECT_NE(with[1], without[1]) << "lora.dropout 0.1 should change step 2's loss";
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// final/ is a PEFT adapter directory; `kiln export --checkpoint RUN --merge` folds it into the
// base, and the merged model evaluates as base + adapter does; without --merge the export is the
// adapter again; model.adapter continues training from final/.
TEST(CheckpointLora, FinalIsAnAdapterAndTheMergedExportEvaluatesAlike) {
  const fs::path d = make_run("lora_final", kLora);
  const std::string recipe = (d / "recipe.yaml").string();
  auto run = run_kiln("train " + recipe + " output.dir=" + (d / "run").string());
  ASSERT_EQ(run.code, 0) << run.out;
  const Json config = read_json_file(d / "run/final/adapter_config.json");
  EXPECT_EQ(config.at("peft_type"), "LORA");
  EXPECT_EQ(config.at("r"), 4);
  EXPECT_EQ(config.at("lora_alpha"), 8);
  EXPECT_EQ(config.at("target_modules").size(), 7u);
  EXPECT_EQ(config.at("base_model_name_or_path"), (d / "init").string());
  EXPECT_FALSE(fs::exists(d / "run/final/model.safetensors"));
  const double base = eval_loss("--model " + (d / "init").string());
  const double adapted =
      eval_loss("--model " + (d / "init").string() + " --adapter " + (d / "run/final").string());
  auto merge = run_kiln("export --checkpoint " + (d / "run").string() + " --merge --out " +
                        (d / "merged").string());
  ASSERT_EQ(merge.code, 0) << merge.out;
  const double merged = eval_loss("--model " + (d / "merged").string());
  EXPECT_NEAR(merged, adapted, 1e-5 * adapted);
  EXPECT_LT(adapted, base - 1e-3) << "training the adapters should lower the loss";
  auto again = run_kiln("export --checkpoint " + (d / "run").string() + " --out " +
                        (d / "adapter").string());
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(max_weight_diff(adapter_file(d / "run"), d / "adapter/adapter_model.safetensors"), 0.0);
  auto plain = run_kiln("export --checkpoint " + (d / "init").string() + " --merge --out " +
                        (d / "nothing").string());
  EXPECT_NE(plain.code, 0);
  EXPECT_FALSE(fs::exists(d / "nothing"));
  // Continuing from final/: its first step starts where the first run ended (a lower loss than
  // the fresh adapters' first step).
  auto more = run_kiln("train " + recipe + " model.adapter=" + (d / "run/final").string() +
                       " train.max_steps=2 output.dir=" + (d / "more").string());
  ASSERT_EQ(more.code, 0) << more.out;
  const auto first = run_losses(d / "run"), next = run_losses(d / "more");
  ASSERT_FALSE(next.empty());
  EXPECT_LT(next[0], first[0] - 1e-3);
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

TEST(Checkpoint, KilledWorkersRestartAndFinishLikeAnUninterruptedRun) {
  const fs::path d = make_run("restart", "failure:\n  max_restarts: 2\n");
  const std::string recipe = (d / "recipe.yaml").string();
  auto full = run_kiln("train " + recipe +
                       " dist.nproc_per_node=2 train.micro_batch_size=2 "
                       "output.dir=" +
                       (d / "full").string());
  ASSERT_EQ(full.code, 0) << full.out;
  // Rank 1 is SIGKILLed at the start of step 12 in the first attempt; the group restarts from
  // the newest committed checkpoint (step 5, or step 10 once its background write is committed).
  auto r = run_kiln("train " + recipe +
                        " dist.nproc_per_node=2 train.micro_batch_size=2 "
                        "output.dir=" +
                        (d / "killed").string(),
                    "KILN_FAULT=1:12:kill:0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("restarting the group from the newest checkpoint"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  EXPECT_EQ(max_weight_diff(d / "full/final", d / "killed/final"), 0.0);
  for (const auto& e : fs::directory_iterator(d / "killed/checkpoints")) {
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
  }
  // Failing in every attempt spends the budget; the history names each failure.
  auto spent = run_kiln("train " + recipe +
                            " dist.nproc_per_node=2 train.micro_batch_size=2 "
                            "failure.max_restarts=1 output.dir=" +
                            (d / "spent").string(),
                        "KILN_FAULT=0:3:exit:*");
  EXPECT_NE(spent.code, 0);
  EXPECT_NE(spent.out.find("worker group failed after 1 restart(s): attempt 1: rank 0"),
            std::string::npos)
      << spent.out;
  EXPECT_NE(spent.out.find("attempt 2: rank 0"), std::string::npos) << spent.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

TEST_P(CheckpointFamily, ResumeAtAnotherWorldSizeContinuesTheSameRun) {
  const fs::path d = make_run("reshard" + GetParam(), "", GetParam());
  const std::string recipe = (d / "recipe.yaml").string();
  auto four = run_kiln("train " + recipe +
                       " dist.nproc_per_node=4 train.micro_batch_size=1 "
                       "output.dir=" +
                       (d / "four").string());
  ASSERT_EQ(four.code, 0) << four.out;
  auto two = run_kiln("train " + recipe +
                      " dist.nproc_per_node=2 train.micro_batch_size=2 "
                      "train.resume=" +
                      (d / "four/checkpoints/step-00000010").string() +
                      " output.dir=" + (d / "two").string());
  ASSERT_EQ(two.code, 0) << two.out;
  const auto a = run_losses(d / "four"), b = run_losses(d / "two");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u);  // steps 11..20
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_NEAR(b[i], a[10 + i], 1e-5 * std::fabs(a[10 + i])) << "step " << 11 + i;
  }
  EXPECT_LT(max_weight_diff(d / "four/final", d / "two/final"), 1e-4);
  // The same checkpoint on one process (no_shard) as well.
  auto one = run_kiln("train " + recipe +
                      " train.resume=" + (d / "four/checkpoints/step-00000015").string() +
                      " output.dir=" + (d / "one").string());
  ASSERT_EQ(one.code, 0) << one.out;
  const auto c = run_losses(d / "one");
  ASSERT_EQ(c.size(), 5u);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], a[15 + i], 1e-5 * std::fabs(a[15 + i]));
  // The model directories keep the base's model_type and architectures.
  const Json base = read_json_file(d / "init/config.json");
  for (const char* run : {"four/final", "two/final", "one/final"}) {
    const Json got = read_json_file(d / run / "config.json");
    EXPECT_EQ(got.at("model_type"), base.at("model_type")) << run;
    EXPECT_EQ(got.at("architectures"), base.at("architectures")) << run;
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(Families, CheckpointFamily,
                         ::testing::Values("tiny", "tiny-qwen3", "tiny-llama"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(Checkpoint, ExportStreamsFromShardsAndTornCheckpointsAreIgnored) {
  const fs::path d = make_run("export");
  const std::string recipe = (d / "recipe.yaml").string();
  auto r = run_kiln("train " + recipe +
                    " dist.nproc_per_node=2 train.micro_batch_size=2 "
                    "checkpoint.keep_last=2 output.dir=" +
                    (d / "run").string());
  ASSERT_EQ(r.code, 0) << r.out;
  // keep_last=2: steps 15 and 20 remain
  EXPECT_FALSE(fs::exists(d / "run/checkpoints/step-00000010"));
  EXPECT_TRUE(fs::exists(d / "run/checkpoints/step-00000015/manifest.json"));
  EXPECT_TRUE(fs::exists(d / "run/checkpoints/step-00000020/rank-00001-of-00002.safetensors"));
  auto e = run_kiln("export --checkpoint " + (d / "run/checkpoints/step-00000020").string() +
                    " --out " + (d / "exported").string());
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_EQ(max_weight_diff(d / "run/final", d / "exported"), 0.0);
  // The same checkpoint named as a model (--model) reads the same shards.
  auto m = run_kiln("export --model " + (d / "run/checkpoints/step-00000020").string() + " --out " +
                    (d / "exported_model").string());
  ASSERT_EQ(m.code, 0) << m.out;
  EXPECT_EQ(max_weight_diff(d / "run/final", d / "exported_model"), 0.0);
  // A half-written checkpoint (no final name) is never resumed from.
  fs::create_directories(d / "run/checkpoints/step-00000030.tmp");
  write_file_atomic(d / "run/checkpoints/step-00000030.tmp/rank-00000-of-00002.safetensors", "x");
  auto again = run_kiln("train " + recipe +
                        " dist.nproc_per_node=2 train.micro_batch_size=2 "
                        "train.max_steps=22 train.resume=auto output.dir=" +
                        (d / "run").string());
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("step-00000020 (step 20)"), std::string::npos) << again.out;
  EXPECT_FALSE(fs::exists(d / "run/checkpoints/step-00000030.tmp"));
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A manifest is outside input too: a field missing or of the wrong type is one error naming the
// file, and a shard name can only name a file inside the checkpoint.
TEST(Checkpoint, BadManifestsAreOneLineErrorsAndFilesStayInside) {
  const fs::path d = make_run("manifest");
  auto r = run_kiln("train " + (d / "recipe.yaml").string() +
                    " train.max_steps=5 output.dir=" + (d / "run").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path ck = d / "run/checkpoints/step-00000005";
  const Json good = read_json_file(ck / "manifest.json");
  const std::string shard = good.at("files")[0].at("name").get<std::string>();
  write_file_atomic(d / "outside.safetensors", read_file(ck / shard));
  auto export_error = [&](const Json& m) {
    write_file_atomic(ck / "manifest.json", m.dump());
    auto e = run_kiln("export --checkpoint " + ck.string() + " --out " + (d / "out").string());
    EXPECT_NE(e.code, 0) << e.out;
    EXPECT_EQ(std::count(e.out.begin(), e.out.end(), '\n'), 1) << e.out;
    return e.out;
  };
  Json m = good;
  m.erase("units");
  std::string out = export_error(m);
  EXPECT_EQ(out.rfind("kiln: error: " + (ck / "manifest.json").string() + ": ", 0), 0u) << out;
  EXPECT_NE(out.find("'units' not found"), std::string::npos) << out;
  m = good;
  m["units"] = "many";
  EXPECT_NE(export_error(m).find((ck / "manifest.json").string()), std::string::npos);
  for (const Json& bad :
       {Json("../../outside.safetensors"), Json("/etc/passwd"), Json(".."), Json(7), Json()}) {
    for (const char* list : {"files", "other_files"}) {
      m = good;
      Json entry = m[list][0];
      entry["name"] = bad;
      m[list][0] = entry;
      out = export_error(m);
      EXPECT_NE(
          out.find("files entry " + entry.dump() + " is not a file name inside the checkpoint"),
          std::string::npos)
          << out;
    }
  }
  // A plain name that is a link out of the checkpoint is refused too, whatever it points to.
  fs::rename(ck / shard, d / "moved.safetensors");
  fs::create_symlink(d / "outside.safetensors", ck / shard);
  write_file_atomic(ck / "manifest.json", good.dump());
  out = export_error(good);
  EXPECT_NE(out.find((ck / shard).string() + ": not a regular file"), std::string::npos) << out;
  fs::remove(ck / shard);
  fs::rename(d / "moved.safetensors", ck / shard);
  write_file_atomic(ck / "manifest.json", good.dump());
  auto e = run_kiln("export --checkpoint " + ck.string() + " --out " + (d / "out").string());
  EXPECT_EQ(e.code, 0) << e.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A full disk during a save: a clear error naming the checkpoint, and the previous checkpoint
// intact and loadable. Needs root to mount a small tmpfs; skipped with the reason otherwise.
TEST(Checkpoint, FullDiskKeepsThePreviousCheckpoint) {
  const fs::path d = make_run("fulldisk");
  const fs::path mnt = d / "small";
  fs::create_directories(mnt);
  const std::string mount = "mount -t tmpfs -o size=3m tmpfs " + mnt.string() + " 2>&1";
  if (std::system(mount.c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a 3 MiB tmpfs here (needs root): full-disk test not run";
  }
  // Each checkpoint of the tiny model is ~2.6 MB (params + AdamW m and v): step 5 fits, step 10
  // does not. Its shard is written in the background: the failure stops training a step or two
  // later, on every rank.
  auto r = run_kiln("train " + (d / "recipe.yaml").string() +
                    " checkpoint.background=true output.dir=" + (mnt / "run").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("kiln: error: checkpoint step 10 failed on rank 0"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(mnt / "run/checkpoints/step-00000010"));
  EXPECT_FALSE(fs::exists(mnt / "run/checkpoints/step-00000010.tmp"));
  auto e = run_kiln("export --checkpoint " + (mnt / "run/checkpoints/step-00000005").string() +
                    " --out " + (d / "exported").string());
  EXPECT_EQ(e.code, 0) << e.out;
  std::system(("umount " + mnt.string()).c_str());
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Every entry of a run's checkpoints/ is a committed checkpoint: no ".tmp" directory is left and
// every directory has its manifest.
void expect_only_committed(const fs::path& ckpts) {
  for (const auto& e : fs::directory_iterator(ckpts)) {
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
    EXPECT_TRUE(fs::exists(e.path() / "manifest.json")) << e.path();
  }
}

// kill -9 of a worker while it writes its checkpoint shard (in the background, during the next
// step) and while it waits in a collective: the group restarts from the newest committed
// checkpoint and ends with the uninterrupted run's weights, bit for bit.
TEST(Checkpoint, KillDuringCheckpointWriteOrCollectiveRestartsBitIdentical) {
  const fs::path d = make_run("killpoints", "failure:\n  max_restarts: 2\n");
  const std::string train = "train " + (d / "recipe.yaml").string() +
                            " dist.nproc_per_node=2 train.micro_batch_size=2 train.max_steps=12 "
                            "output.dir=";
  auto full = run_kiln(train + (d / "full").string());
  ASSERT_EQ(full.code, 0) << full.out;
  // Rank 1 dies with half of its step-10 shard written: step 10 is never committed, so the
  // group restarts from step 5 (which the step-10 save point waited for).
  auto ck = run_kiln(train + (d / "ckpt").string(), "KILN_FAULT=1:10:kill@checkpoint:0");
  ASSERT_EQ(ck.code, 0) << ck.out;
  EXPECT_NE(ck.out.find("rank 1 injecting 'kill' at step 10 (checkpoint)"), std::string::npos)
      << ck.out;
  EXPECT_NE(ck.out.find("restarting the group from the newest checkpoint"), std::string::npos)
      << ck.out;
  EXPECT_NE(ck.out.find("step-00000005 (step 5)"), std::string::npos) << ck.out;
  EXPECT_EQ(max_weight_diff(d / "full/final", d / "ckpt/final"), 0.0);
  expect_only_committed(d / "ckpt/checkpoints");
  // The same with synchronous saves: the kill lands while training waits for the write.
  auto sy = run_kiln(train + (d / "sync").string() + " checkpoint.background=false",
                     "KILN_FAULT=1:10:kill@checkpoint:0");
  ASSERT_EQ(sy.code, 0) << sy.out;
  EXPECT_NE(sy.out.find("rank 1 injecting 'kill' at step 10 (checkpoint)"), std::string::npos)
      << sy.out;
  EXPECT_NE(sy.out.find("step-00000005 (step 5)"), std::string::npos) << sy.out;
  EXPECT_EQ(max_weight_diff(d / "full/final", d / "sync/final"), 0.0);
  expect_only_committed(d / "sync/checkpoints");
  // Rank 0 dies inside the first collective of step 11 (the one that carries the background
  // write's status): the group restarts from step 5 or 10, whichever is committed.
  auto co = run_kiln(train + (d / "coll").string(), "KILN_FAULT=0:11:kill@collective:0");
  ASSERT_EQ(co.code, 0) << co.out;
  EXPECT_NE(co.out.find("rank 0 injecting 'kill' at step 11 (collective)"), std::string::npos)
      << co.out;
  EXPECT_NE(co.out.find("resumed from"), std::string::npos) << co.out;
  EXPECT_EQ(max_weight_diff(d / "full/final", d / "coll/final"), 0.0);
  expect_only_committed(d / "coll/checkpoints");
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// Background and synchronous saving write the same checkpoints, byte for byte, and training
// ends with the same weights; the log reports how long training was blocked.
TEST(Checkpoint, BackgroundAndSynchronousSavesAreIdentical) {
  const fs::path d = make_run("background");
  const std::string train = "train " + (d / "recipe.yaml").string() +
                            " dist.nproc_per_node=2 train.micro_batch_size=2 train.max_steps=12 "
                            "output.dir=";
  auto bg = run_kiln(train + (d / "bg").string() + " checkpoint.background=true");
  ASSERT_EQ(bg.code, 0) << bg.out;
  auto sync = run_kiln(train + (d / "sync").string() + " checkpoint.background=false");
  ASSERT_EQ(sync.code, 0) << sync.out;
  EXPECT_NE(bg.out.find("step-00000010: training blocked"), std::string::npos) << bg.out;
  EXPECT_NE(bg.out.find("in the background"), std::string::npos) << bg.out;
  EXPECT_EQ(sync.out.find("in the background"), std::string::npos) << sync.out;
  for (const char* step : {"step-00000005", "step-00000010", "step-00000012"}) {
    for (const char* f : {"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"}) {
      const fs::path a = d / "bg/checkpoints" / step / f, b = d / "sync/checkpoints" / step / f;
      ASSERT_TRUE(fs::exists(a)) << a;
      EXPECT_TRUE(read_file(a) == read_file(b)) << a << " differs from " << b;
    }
    const Json ma = read_json_file(d / "bg/checkpoints" / step / "manifest.json");
    const Json mb = read_json_file(d / "sync/checkpoints" / step / "manifest.json");
    EXPECT_EQ(ma.at("optimizer_steps"), mb.at("optimizer_steps")) << step;
    EXPECT_EQ(ma.at("sampler"), mb.at("sampler")) << step;
    EXPECT_EQ(ma.at("metrics"), mb.at("metrics")) << step;
  }
  EXPECT_EQ(max_weight_diff(d / "bg/final", d / "sync/final"), 0.0);
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

double kiln_eval(const fs::path& model, const fs::path& data) {
  auto e = run_kiln(
      "eval --model " + model.string() + " --data " + data.string() + " --seq-len 64 --json",
      "OMP_NUM_THREADS=1");  // many tiny GEMMs: threads only wait on a busy machine
  EXPECT_EQ(e.code, 0) << e.out;
  // The JSON line, after any log lines.
  const size_t at = e.out.rfind("{\"loss\"");
  EXPECT_NE(at, std::string::npos) << e.out;
  if (at == std::string::npos) return 0;
  return parse_json(e.out.substr(at, e.out.find('\n', at) - at), "kiln eval")
      .at("loss")
      .get<double>();
}

// data.eval on 2 workers (17 examples in batches of 2: in the last round rank 1 has none) every 5
// steps and after the last: eval_loss on exactly those rows, in the progress line and in the
// manifests, equal to `kiln eval` of the saved checkpoints; keep_best keeps the best by it (here
// the highest, best_mode=max, so that it is not the newest one).
TEST(Checkpoint, EvalLossMatchesKilnEvalAndKeepBestKeepsTheBest) {
  const fs::path d = make_run("eval");
  {
    std::ifstream in(std::string(KILN_SOURCE_DIR) + "/assets/demo/tokens.jsonl");
    std::string text, line;
    for (int i = 0; i < 17 && std::getline(in, line); ++i) text += line + "\n";
    write_file_atomic(d / "eval.jsonl", text);
  }
  const std::string train = "train " + (d / "recipe.yaml").string() +
                            " dist.nproc_per_node=2 train.micro_batch_size=2 train.max_steps=12 "
                            "data.eval=" +
                            (d / "eval.jsonl").string() +
                            " eval.every_steps=5 checkpoint.keep_last=1 checkpoint.keep_best=1 "
                            "checkpoint.best_mode=max "
                            "output.dir=";
  auto r = run_kiln(train + (d / "run").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| eval_loss "), std::string::npos) << r.out;
  const auto rows = run_metric_rows(d / "run");
  ASSERT_EQ(rows.size(), 12u);
  std::map<int64_t, double> evals;
  for (const auto& row : rows) {
    if (row.contains("eval_loss")) evals[row.at("step").get<int64_t>()] = row["eval_loss"];
  }
  ASSERT_EQ(evals.size(), 3u) << r.out;
  ASSERT_TRUE(evals.count(5) && evals.count(10) && evals.count(12));
  // keep_last=1 keeps step 12, keep_best=1 the one with the highest eval_loss (12 counts too).
  int64_t best = 5;
  for (const auto& [step, loss] : evals) {
    if (loss >= evals[best]) best = step;
  }
  std::set<std::string> kept, want = {"step-00000012", checkpoint_name(best)};
  for (const auto& e : fs::directory_iterator(d / "run/checkpoints")) {
    kept.insert(e.path().filename().string());
  }
  EXPECT_EQ(kept, want);
  for (const auto& name : kept) {
    const int64_t step = std::stoll(name.substr(5));
    const Json m = read_json_file(d / "run/checkpoints" / name / "manifest.json");
    EXPECT_EQ(m.at("metrics").at("eval_loss").get<double>(), evals[step]) << name;
    const double ref = kiln_eval(d / "run/checkpoints" / name, d / "eval.jsonl");
    EXPECT_NEAR(evals[step], ref, 1e-5 * std::fabs(ref)) << name;
  }
  const double fin = kiln_eval(d / "run/final", d / "eval.jsonl");
  EXPECT_NEAR(evals[12], fin, 1e-5 * std::fabs(fin));
  // The step-12 value is not the step-5 one: the evaluation follows the weights.
  EXPECT_NE(evals[5], evals[12]);

  // One process, eval.max_batches=2 of 4 examples: the first 8 examples of the file, at the end.
  {
    std::ifstream in(d / "eval.jsonl");
    std::string text, line;
    for (int i = 0; i < 8 && std::getline(in, line); ++i) text += line + "\n";
    write_file_atomic(d / "eval8.jsonl", text);
  }
  auto one = run_kiln("train " + (d / "recipe.yaml").string() +
                      " train.max_steps=3 data.eval=" + (d / "eval.jsonl").string() +
                      " eval.max_batches=2 output.dir=" + (d / "one").string());
  ASSERT_EQ(one.code, 0) << one.out;
  const auto one_rows = run_metric_rows(d / "one");
  ASSERT_EQ(one_rows.size(), 3u);
  EXPECT_FALSE(one_rows[1].contains("eval_loss"));  // eval.every_steps=0: only after the last
  ASSERT_TRUE(one_rows[2].contains("eval_loss"));
  const double ref8 = kiln_eval(d / "one/final", d / "eval8.jsonl");
  EXPECT_NEAR(one_rows[2]["eval_loss"].get<double>(), ref8, 1e-5 * std::fabs(ref8));

  // keep_best by eval_loss without data.eval is refused at the start.
  auto bad = run_kiln("train " + (d / "recipe.yaml").string() +
                      " checkpoint.keep_best=2 output.dir=" + (d / "bad").string());
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("checkpoint.keep_best"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("data.eval"), std::string::npos) << bad.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
