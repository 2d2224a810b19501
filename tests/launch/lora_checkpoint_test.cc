// A LoRA run's checkpoints used everywhere (issue 34): `kiln eval` and `kiln generate` take a
// LoRA run's checkpoint or run directory as --model (its recipe's base with its adapters,
// unmerged) or as --adapter, exactly as the adapter directory `kiln export --checkpoint` writes;
// adapters are tied to the base they were trained on (resume, --merge, eval); a LoRA checkpoint
// given to a full run (and the reverse) names what differs; lora.rank is bounded by the model.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "common/run_kiln.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

using testing::CmdResult;
using testing::run_kiln;

const std::string kData = std::string(KILN_SOURCE_DIR) + "/assets/demo/tokens.jsonl";
const std::string kTokenizer =
    std::string(KILN_SOURCE_DIR) + "/assets/tokenizer/demo/tokenizer.json";

// LoRA: rank-4 adapters on every projection of the frozen tiny base at d/init, 10 steps, a
// checkpoint every 5.
constexpr const char* kLora = "lora:\n  rank: 4\n  alpha: 8\n";

fs::path make_lora_run(const std::string& name, const std::string& lora = kLora) {
  return testing::write_tiny_run("kiln_lora_ckpt", name, 2,
                                 "optimizer:\n  lr: 3.0e-3\n"
                                 "train:\n  max_steps: 10\n  micro_batch_size: 4\n  log_every: 10\n"
                                 "checkpoint:\n  every_steps: 5\n  keep_last: 0\n"
                                 "dist:\n  timeout_s: 30\n  threads_per_worker: 1\n" +
                                     lora);
}

CmdResult train(const fs::path& d, const std::string& args) {
  return run_kiln("train " + (d / "recipe.yaml").string() + " " + args);
}

// The loss `kiln eval --json` prints for `model_args` over `data` (its last line that is a JSON
// object).
double eval_loss(const fs::path& data, const std::string& model_args) {
  const CmdResult r =
      run_kiln("eval --json --data " + data.string() + " --seq-len 64 " + model_args);
  EXPECT_EQ(r.code, 0) << r.out;
  if (r.code != 0) return NAN;
  const size_t at = r.out.rfind("\n{");
  const std::string line = r.out.substr(at == std::string::npos ? 0 : at + 1);
  return Json::parse(line.substr(0, line.find('\n'))).at("loss").get<double>();
}

// A failure: non-zero exit, and the last line of the output is kiln's one error line naming
// every needle.
void expect_error(const CmdResult& r, std::initializer_list<std::string> needles) {
  EXPECT_NE(r.code, 0) << r.out;
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string last =
      out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  EXPECT_EQ(last.rfind("kiln: error: ", 0), 0u) << r.out;
  for (const std::string& n : needles) {
    EXPECT_NE(last.find(n), std::string::npos) << "missing '" << n << "' in " << last;
  }
}

// eval and generate of a LoRA run's checkpoint (as --model, or as --adapter on its base; the run
// directory means its newest checkpoint) equal those of its `export --checkpoint` adapter
// directory applied to the base, within 1e-5: the same adapter values, applied unmerged. The
// adapters move the loss, so the checks cannot pass with them ignored.
TEST(LoraCheckpoint, EvalAndGenerateTakeALoraRunsCheckpoints) {
  const fs::path d = make_lora_run("use");
  ASSERT_EQ(train(d, "output.dir=" + (d / "run").string()).code, 0);
  const std::string base = (d / "init").string();
  {  // 16 examples of the training data: enough to see the adapters, quick to evaluate
    std::ifstream in(kData);
    std::string text, line;
    for (int i = 0; i < 16 && std::getline(in, line); ++i) text += line + "\n";
    write_file_atomic(d / "eval.jsonl", text);
  }
  const auto eval_loss = [&](const std::string& model_args) {
    return kiln::eval_loss(d / "eval.jsonl", model_args);
  };
  const fs::path step5 = d / "run/checkpoints/step-00000005";
  ASSERT_EQ(
      run_kiln("export --checkpoint " + step5.string() + " --out " + (d / "a5").string()).code, 0);
  const double exported = eval_loss("--model " + base + " --adapter " + (d / "a5").string());
  EXPECT_GT(std::fabs(exported - eval_loss("--model " + base)), 1e-4 * exported)
      << "the adapters do not move the loss";
  EXPECT_NEAR(eval_loss("--model " + step5.string()), exported, 1e-5 * exported);
  EXPECT_NEAR(eval_loss("--model " + base + " --adapter " + step5.string()), exported,
              1e-5 * exported);
  // The run directory: its newest checkpoint (step 10), whose adapters final/ holds.
  const double fin = eval_loss("--model " + base + " --adapter " + (d / "run/final").string());
  EXPECT_NEAR(eval_loss("--model " + (d / "run").string()), fin, 1e-5 * fin);
  EXPECT_NEAR(eval_loss("--model " + base + " --adapter " + (d / "run").string()), fin, 1e-5 * fin);
  EXPECT_GT(std::fabs(fin - exported), 1e-6 * fin) << "step 10 should differ from step 5";

  // Greedy text (stdout alone: the log on stderr names the paths).
  const auto generate = [&](const std::string& model_args) {
    return testing::run_shell(testing::kiln_binary() + " generate " + model_args + " --tokenizer " +
                              kTokenizer +
                              " --prompt 'abc def' --max-new-tokens 8 --temperature 0 2>/dev/null");
  };
  const CmdResult want = generate("--model " + base + " --adapter " + (d / "a5").string());
  ASSERT_EQ(want.code, 0);
  EXPECT_FALSE(want.out.empty());
  EXPECT_EQ(generate("--model " + step5.string()).out, want.out);
  EXPECT_EQ(generate("--model " + base + " --adapter " + step5.string()).out, want.out);
  // --adapter beside a LoRA checkpoint as --model: which adapters? One line says.
  expect_error(run_kiln("eval --data " + kData + " --model " + step5.string() + " --adapter " +
                        (d / "a5").string()),
               {"brings its own adapters", base});
  // final/ is adapters only: as --model, one line says what to do.
  expect_error(run_kiln("eval --data " + kData + " --model " + (d / "run/final").string()),
               {"is a PEFT adapter directory", "as --adapter"});
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A run records its base's fingerprint; with model.path replaced by other weights of the same
// shapes, resuming, evaluating the checkpoint and merging (from the checkpoint, or an exported
// adapter onto the other base) are refused in one line naming both; --allow-other-base merges
// anyway, and the original base still takes the adapters.
TEST(LoraCheckpoint, AdaptersAreTiedToTheirBase) {
  const fs::path d = make_lora_run("tied");
  ASSERT_EQ(train(d, "train.max_steps=5 output.dir=" + (d / "run").string()).code, 0);
  const fs::path step5 = d / "run/checkpoints/step-00000005";
  ASSERT_EQ(
      run_kiln("export --checkpoint " + step5.string() + " --out " + (d / "a5").string()).code, 0);
  EXPECT_TRUE(fs::exists(d / "a5/kiln_base.json"));
  EXPECT_TRUE(fs::exists(d / "run/final/kiln_base.json"));
  fs::copy(d / "init", d / "orig", fs::copy_options::recursive);
  // model.path now holds another seed's weights: the same shapes, other values.
  ASSERT_EQ(run_kiln("init --config tiny --seed 9 --out " + (d / "other").string()).code, 0);
  fs::copy_file(d / "other/model.safetensors", d / "init/model.safetensors",
                fs::copy_options::overwrite_existing);
  const std::string init = (d / "init").string();

  expect_error(train(d, "train.resume=auto output.dir=" + (d / "run").string()),
               {"model.path " + init, "is not the base", "step-00000005"});
  expect_error(
      run_kiln("export --checkpoint " + step5.string() + " --merge --out " + (d / "m1").string()),
      {step5.string(), init, "--allow-other-base"});
  EXPECT_FALSE(fs::exists(d / "m1"));
  expect_error(run_kiln("export --model " + init + " --adapter " + (d / "a5").string() +
                        " --merge --out " + (d / "m2").string()),
               {(d / "a5").string(), init, "--allow-other-base"});
  EXPECT_FALSE(fs::exists(d / "m2"));
  expect_error(run_kiln("eval --data " + kData + " --model " + step5.string()),
               {"another base", init});
  // A new run continuing the adapters (model.adapter) on the changed base says so.
  const CmdResult continued =
      train(d, "model.adapter=" + (d / "a5").string() +
                   " train.max_steps=1 output.dir=" + (d / "run2").string());
  EXPECT_EQ(continued.code, 0) << continued.out;
  EXPECT_NE(continued.out.find("model.adapter " + (d / "a5").string() +
                               " was trained on another base than " + init),
            std::string::npos)
      << continued.out;
  // Anyway, when asked; and onto the base they were trained on, without asking.
  const CmdResult anyway = run_kiln("export --model " + init + " --adapter " + (d / "a5").string() +
                                    " --merge --allow-other-base --out " + (d / "m3").string());
  EXPECT_EQ(anyway.code, 0) << anyway.out;
  EXPECT_NE(anyway.out.find("applying them anyway"), std::string::npos) << anyway.out;
  const CmdResult own = run_kiln("export --model " + (d / "orig").string() + " --adapter " +
                                 (d / "a5").string() + " --merge --out " + (d / "m4").string());
  EXPECT_EQ(own.code, 0) << own.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A merge that would write non-finite weights is refused naming the tensor, and writes nothing:
// an adapter holding a NaN (what a diverged run leaves), and finite adapters whose product
// overflows float32.
TEST(LoraCheckpoint, NonFiniteMergesAreRefused) {
  const fs::path d = make_lora_run("nan");
  ASSERT_EQ(train(d, "train.max_steps=5 output.dir=" + (d / "run").string()).code, 0);
  const std::string init = (d / "init").string();
  // Rewrites final/'s adapter_model.safetensors into `out` with `value` in place of the first
  // element of every lora_B of layer 0 and `a_value` (when not 0) of every lora_A of layer 0.
  const auto poisoned = [&](const std::string& out, const char* b_value, const char* a_value) {
    fs::copy(d / "run/final", d / out, fs::copy_options::recursive);
    const std::string script =
        "import json,struct,sys\n"
        "p=sys.argv[1]; b=open(p,'rb').read(); n=struct.unpack('<Q',b[:8])[0]\n"
        "h=json.loads(b[8:8+n]); data=bytearray(b[8+n:])\n"
        "for k,v in h.items():\n"
        "  if not k.startswith('base_model.model.model.layers.0.'): continue\n"
        "  val = float(sys.argv[2]) if k.endswith('lora_B.weight') else float(sys.argv[3])\n"
        "  if val == 0: continue\n"
        "  o=v['data_offsets'][0]; f=struct.pack('<f', val)\n"
        "  if v['dtype']=='BF16': data[o:o+2]=f[2:]\n"
        "  else: data[o:o+4]=f\n"
        "open(p,'wb').write(b[:8+n]+bytes(data))\n";
    write_file_atomic(d / "poison.py", script);
    const CmdResult r = testing::run_shell("python3 " + (d / "poison.py").string() + " " +
                                           (d / out / "adapter_model.safetensors").string() + " " +
                                           b_value + " " + a_value + " 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
  };
  poisoned("nan", "nan", "0");
  expect_error(run_kiln("export --model " + init + " --adapter " + (d / "nan").string() +
                        " --merge --out " + (d / "m").string()),
               {"base_model.model.model.layers.0.", "lora_B.weight holds nan", "not finite"});
  EXPECT_FALSE(fs::exists(d / "m"));
  poisoned("huge", "3e38", "3e38");
  expect_error(run_kiln("export --model " + init + " --adapter " + (d / "huge").string() +
                        " --merge --out " + (d / "m").string()),
               {"merged weight model.layers.0.", "W + s B A is not finite"});
  EXPECT_FALSE(fs::exists(d / "m"));
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A LoRA run's checkpoint resumed by a recipe without a lora section, and a full run's by one
// with it, name the difference rather than a unit count; lora.rank beyond the model's smallest
// target is one line naming lora.rank (it used to die in an allocation, naming nothing).
TEST(LoraCheckpoint, MismatchedRunsAndRanksAreNamed) {
  const fs::path d = make_lora_run("kinds");
  ASSERT_EQ(train(d, "train.max_steps=5 output.dir=" + (d / "lora").string()).code, 0);
  std::string full_recipe = read_file(d / "recipe.yaml");
  full_recipe = full_recipe.substr(0, full_recipe.find("lora:"));
  write_file_atomic(d / "full.yaml", full_recipe);
  const std::string full = "train " + (d / "full.yaml").string();
  const fs::path lora5 = d / "lora/checkpoints/step-00000005";
  expect_error(
      run_kiln(full + " train.resume=" + lora5.string() + " output.dir=" + (d / "x").string()),
      {"step-00000005 is a LoRA run's (adapters on a frozen base)", "no lora section"});
  ASSERT_EQ(run_kiln(full + " train.max_steps=5 output.dir=" + (d / "full").string()).code, 0);
  expect_error(train(d, "train.resume=" + (d / "full/checkpoints/step-00000005").string() +
                            " output.dir=" + (d / "y").string()),
               {"is a full fine-tuning run's", "has a lora section"});
  expect_error(train(d, "lora.rank=1000000000 output.dir=" + (d / "z").string()),
               {"lora.rank: 1000000000 is more than"});
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
