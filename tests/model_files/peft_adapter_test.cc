// PEFT adapter directories: kiln reads the fixture tools/make_peft_fixture.py writes from PEFT's
// documented format, writes the same names, shapes, dtype and config keys, round-trips exactly,
// and refuses bad adapters in one line naming the file, the field or tensor, writing nothing.
#include "kiln/model_files/peft_adapter.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <set>

#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/io/safetensors.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/tensor/dtype.h"

namespace kiln {
namespace {

const fs::path kFixture = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/peft_tiny_adapter";
const fs::path kTokenizer =
    fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/tiny_tokenizer.json";

// tools/make_peft_fixture.py's value(): element k of a factor.
float fixture_value(int64_t layer, LoraTarget t, LoraFactor f, int64_t k) {
  const int64_t fi = f == LoraFactor::kA ? 0 : 1;
  return static_cast<float>((k * 7 + layer * 3 + static_cast<int>(t) * 5 + fi * 11) % 17 - 8) /
         16.0f;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "no error";
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

class PeftDir : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "base");
    write_file_atomic(dir_ / "base/config.json", config_to_json(model_).dump(2));
    fs::copy_file(kTokenizer, dir_ / "base/tokenizer.json");
  }

  // A copy of the fixture whose adapter_config.json has `key` set to `value` (parsed as JSON).
  fs::path fixture_with(const std::string& key, const std::string& value) {
    const fs::path d = dir_ / "edited";
    fs::remove_all(d);
    fs::copy(kFixture, d);
    Json j = read_json_file(d / kPeftConfigFile);
    j[key] = Json::parse(value);
    write_file_atomic(d / kPeftConfigFile, j.dump(2));
    return d;
  }

  // A copy of the fixture with the weights `edit` makes of its tensors.
  fs::path fixture_with_tensors(const std::function<void(std::vector<TensorToWrite>&)>& edit) {
    const fs::path d = dir_ / "edited";
    fs::remove_all(d);
    fs::copy(kFixture, d);
    const SafetensorsFile st(kFixture / kPeftWeightsFile);
    std::vector<std::vector<float>> data;
    std::vector<TensorToWrite> list;
    for (const TensorInfo& t : st.tensors()) {
      data.emplace_back(t.numel());
      st.read_f32(t, data.back().data());
    }
    for (size_t i = 0; i < st.tensors().size(); ++i)
      list.push_back({st.tensors()[i].name, st.tensors()[i].shape, data[i].data()});
    edit(list);
    write_safetensors(d / kPeftWeightsFile, list, DType::F32, {{"format", "pt"}});
    return d;
  }

  HfModelFiles files() const { return HfModelFiles::read(dir_ / "base"); }

  testing::TempDir tmp_{"kiln_peft"};
  const fs::path dir_ = tmp_.path();
  ModelConfig model_ = preset_config("tiny-qwen3");
};

TEST_F(PeftDir, ReadsTheFixture) {
  const PeftAdapter a = read_peft_adapter(kFixture, model_);
  EXPECT_EQ(a.config.lora.rank, 4);
  EXPECT_EQ(a.config.lora.alpha, 8.0);
  EXPECT_EQ(a.config.lora.dropout, 0.05);
  EXPECT_EQ(a.config.lora.targets, (std::vector<LoraTarget>{LoraTarget::kQ, LoraTarget::kV}));
  EXPECT_FALSE(a.config.lora.rslora);
  EXPECT_EQ(a.config.base_model_name_or_path, "kiln/tiny-qwen3");
  EXPECT_EQ(a.tensors.num_layers(), 2);
  EXPECT_EQ(a.tensors.shape(LoraTarget::kQ, LoraFactor::kA), (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(a.tensors.shape(LoraTarget::kQ, LoraFactor::kB), (std::vector<int64_t>{256, 4}));
  EXPECT_EQ(a.tensors.shape(LoraTarget::kV, LoraFactor::kB), (std::vector<int64_t>{128, 4}));
  for (int64_t l : {0, 1}) {
    for (LoraTarget t : {LoraTarget::kQ, LoraTarget::kV}) {
      const LoraFactors& f = a.tensors.at(l, t);
      for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{37}, static_cast<int64_t>(f.a.size()) - 1})
        EXPECT_EQ(f.a[k], fixture_value(l, t, LoraFactor::kA, k)) << l << " " << k;
      for (int64_t k : {int64_t{0}, int64_t{5}, int64_t{200}, static_cast<int64_t>(f.b.size()) - 1})
        EXPECT_EQ(f.b[k], fixture_value(l, t, LoraFactor::kB, k)) << l << " " << k;
    }
  }
}

// kiln's writer lays an adapter out as PEFT does: the same tensor names in the same order, shapes,
// dtype and metadata (the same bytes, for the same values), and adapter_config.json with the same
// keys and values; the tokenizer and its chat template beside them, no config.json.
TEST_F(PeftDir, WriterMatchesTheFixture) {
  const PeftAdapter a = read_peft_adapter(kFixture, model_);
  const fs::path out = dir_ / "out";
  write_peft_adapter(out, a.config.lora, a.config.base_model_name_or_path, a.tensors, DType::F32,
                     files());
  const SafetensorsFile ours(out / kPeftWeightsFile), theirs(kFixture / kPeftWeightsFile);
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (size_t i = 0; i < ours.tensors().size(); ++i) {
    EXPECT_EQ(ours.tensors()[i].name, theirs.tensors()[i].name);
    EXPECT_EQ(ours.tensors()[i].shape, theirs.tensors()[i].shape);
    EXPECT_EQ(ours.tensors()[i].dtype, DType::F32);
  }
  EXPECT_EQ(ours.metadata(), theirs.metadata());
  EXPECT_EQ(read_file(out / kPeftWeightsFile), read_file(kFixture / kPeftWeightsFile));

  const Json ours_cfg = read_json_file(out / kPeftConfigFile);
  const Json theirs_cfg = read_json_file(kFixture / kPeftConfigFile);
  EXPECT_EQ(ours_cfg, theirs_cfg);  // every key and value
  // The text as json.dumps(indent=2, sort_keys=True) writes it.
  EXPECT_EQ(read_file(out / kPeftConfigFile), read_file(kFixture / kPeftConfigFile));

  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
  EXPECT_TRUE(read_json_file(out / "tokenizer_config.json").contains("chat_template"));
  EXPECT_FALSE(fs::exists(out / "config.json"));      // an adapter, not a model
  for (const auto& e : fs::directory_iterator(dir_))  // no temporary left beside it
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(PeftDir, WriteThenReadIsExact) {
  LoraConfig lora;
  lora.rank = 3;
  lora.alpha = 6.5;
  lora.rslora = true;
  lora.targets = resolve_lora_targets({"all-linear"}, "test");
  LoraTensors t(model_, lora);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int64_t l = 0; l < t.num_layers(); ++l) {
    for (LoraTarget target : lora.targets) {
      for (float& v : t.at(l, target).a) v = normal(rng);
      for (float& v : t.at(l, target).b) v = normal(rng);
    }
  }
  write_peft_adapter(dir_ / "out", lora, "base", t, DType::F32, files());
  // In name order, as safetensors' writer orders tensors (mlp before self_attn, layer 10 before 2).
  std::vector<std::string> names;
  const SafetensorsFile written(dir_ / "out" / kPeftWeightsFile);
  for (const TensorInfo& i : written.tensors()) names.push_back(i.name);
  EXPECT_EQ(names.size(), 2u * 7 * 2);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.front(), "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight");
  const PeftAdapter back = read_peft_adapter(dir_ / "out", model_);
  EXPECT_EQ(back.config.lora, lora);
  EXPECT_TRUE(back.tensors == t);
  EXPECT_EQ(read_json_file(dir_ / "out" / kPeftConfigFile).at("lora_alpha"), 6.5);

  // bf16: what is read back is each value rounded to bf16, and writing it again changes nothing.
  write_peft_adapter(dir_ / "out", lora, "base", t, DType::BF16, files());
  const LoraTensors rounded = read_peft_adapter(dir_ / "out", model_).tensors;
  const float x = t.at(1, LoraTarget::kDown).b[5];
  EXPECT_EQ(rounded.at(1, LoraTarget::kDown).b[5], bf16_to_f32(f32_to_bf16(x)));
  EXPECT_FALSE(rounded == t);
  write_peft_adapter(dir_ / "out2", lora, "base", rounded, DType::BF16, files());
  EXPECT_TRUE(read_peft_adapter(dir_ / "out2", model_).tensors == rounded);
}

TEST_F(PeftDir, DirectoryWithoutConfig) {
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(error_of([&] { read_peft_adapter_config(dir_ / "empty"); }),
            (dir_ / "empty").string() + ": not a PEFT adapter directory (no adapter_config.json)");
}

TEST_F(PeftDir, RankZeroOrNegative) {
  for (const char* r : {"0", "-2", "2.5", "\"8\""}) {
    const std::string msg = error_of([&] { read_peft_adapter_config(fixture_with("r", r)); });
    EXPECT_HAS(msg, "edited/adapter_config.json: r must be a positive integer, got");
    EXPECT_HAS(msg, r);
  }
}

TEST_F(PeftDir, TargetTheFamilyDoesNotHave) {
  std::string msg = error_of(
      [&] { read_peft_adapter_config(fixture_with("target_modules", "[\"q_proj\", \"fc1\"]")); });
  EXPECT_HAS(msg, "adapter_config.json: target_modules: target 'fc1' is not a module");
  // A string other than all-linear is a regular expression to PEFT.
  msg = error_of(
      [&] { read_peft_adapter_config(fixture_with("target_modules", R"(".*\\.(q|v)_proj")")); });
  EXPECT_HAS(msg, "adapter_config.json: target_modules is the string");
  EXPECT_HAS(msg, "regular expression");
  EXPECT_EQ(read_peft_adapter_config(fixture_with("target_modules", "\"all-linear\""))
                .lora.targets.size(),
            7u);
  // A tensor of a module no family of kiln's has.
  msg = error_of([&] {
    read_peft_adapter(fixture_with_tensors([](std::vector<TensorToWrite>& l) {
                        l[0].name = "base_model.model.model.layers.0.mlp.fc1.lora_A.weight";
                      }),
                      model_);
  });
  EXPECT_HAS(msg,
             "adapter_model.safetensors: tensor base_model.model.model.layers.0.mlp.fc1.lora_A"
             ".weight is not a LoRA factor of this model");
  // A target kiln knows that target_modules does not name.
  msg = error_of([&] {
    read_peft_adapter(fixture_with_tensors([](std::vector<TensorToWrite>& l) {
                        l[0].name =
                            "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight";
                      }),
                      model_);
  });
  EXPECT_HAS(msg,
             "self_attn.k_proj.lora_A.weight adapts k_proj, which adapter_config.json's "
             "target_modules (q_proj, v_proj) leaves out");
}

TEST_F(PeftDir, ShapesThatDoNotFitTheBase) {
  // tiny (Qwen2) has 4 heads of 16: q_proj is (64, 64), not tiny-qwen3's (256, 64).
  std::string msg = error_of([&] { read_peft_adapter(kFixture, preset_config("tiny")); });
  EXPECT_HAS(msg,
             "peft_tiny_adapter/adapter_model.safetensors: tensor "
             "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight has shape "
             "[256, 4], expected [64, 4] (out, r)");
  ModelConfig one_layer = model_;
  one_layer.num_hidden_layers = 1;
  msg = error_of([&] { read_peft_adapter(kFixture, one_layer); });
  EXPECT_HAS(msg,
             "layers.1.self_attn.q_proj.lora_A.weight is for layer 1, but the base model has "
             "1 layers");
  // The config's r and the tensors' disagree.
  msg = error_of([&] { read_peft_adapter(fixture_with("r", "8"), model_); });
  EXPECT_HAS(msg, "has shape [4, 64], expected [8, 64] (r, in)");
  // A factor missing.
  msg = error_of([&] {
    read_peft_adapter(fixture_with_tensors([](std::vector<TensorToWrite>& l) { l.pop_back(); }),
                      model_);
  });
  EXPECT_HAS(msg,
             "adapter_model.safetensors: missing tensor "
             "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight (shape [128, 4] "
             "(out, r))");
}

TEST_F(PeftDir, RefusesWhatIsNotPlainLora) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"use_dora", "true"},
      {"rank_pattern", R"({"q_proj": 8})"},
      {"alpha_pattern", R"({"q_proj": 8})"},
      {"layers_to_transform", "[0]"},
      {"modules_to_save", R"(["lm_head"])"},
      {"bias", R"("all")"},
      {"fan_in_fan_out", "true"},
      {"peft_type", R"("IA3")"},
  };
  for (const auto& [key, value] : cases) {
    const std::string msg = error_of([&] { read_peft_adapter_config(fixture_with(key, value)); });
    EXPECT_HAS(msg, "edited/adapter_config.json: " + key + " is ");
  }
  // Unset spellings of the same fields are accepted.
  EXPECT_NO_THROW(read_peft_adapter_config(fixture_with("modules_to_save", "[]")));
  EXPECT_NO_THROW(read_peft_adapter_config(fixture_with("use_dora", "false")));
}

// The allow-list: a field kiln does not implement is refused unless it holds its default, whether
// kiln knows it (alora_invocation_tokens once slipped through, was trained and re-saved as plain
// LoRA) or not; metadata and unset fields are accepted.
TEST_F(PeftDir, RefusesEveryFieldKilnDoesNotImplement) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"alora_invocation_tokens", "[128000, 882]"},
      {"use_qalora", "true"},
      {"loftq_config", R"({"loftq_bits": 4})"},
      {"arrow_config", R"({"top_k": 3})"},
      {"some_future_field", "3"},
      {"init_lora_weights", R"("pissa")"},
      {"init_lora_weights", R"("olora")"},
  };
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key + " = " + value);
    const std::string msg = error_of([&] { read_peft_adapter_config(fixture_with(key, value)); });
    EXPECT_HAS(msg, "edited/adapter_config.json: " + key + " is " + Json::parse(value).dump());
  }
  EXPECT_HAS(error_of([&] { read_peft_adapter_config(fixture_with("some_future_field", "3")); }),
             "a field kiln does not implement");
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"alora_invocation_tokens", "null"},
                                                        {"some_future_field", "false"},
                                                        {"peft_version", R"("0.17.1")"},
                                                        {"qalora_group_size", "16"},
                                                        {"init_lora_weights", R"("gaussian")"},
                                                        {"init_lora_weights", "false"},
                                                        {"task_type", R"("SEQ_CLS")"}}) {
    SCOPED_TRACE(key + " = " + value);
    EXPECT_NO_THROW(read_peft_adapter_config(fixture_with(key, value)));
  }
}

// kiln_base.json: the base's fingerprint written beside the adapter and read back; none without
// it (a PEFT-written adapter); a malformed one is an error naming the file.
TEST_F(PeftDir, RecordsTheFingerprintOfItsBase) {
  EXPECT_FALSE(read_peft_adapter_config(kFixture).base_fingerprint.has_value());
  const PeftAdapter a = read_peft_adapter(kFixture, model_);
  const FileDigest base{123456, 0x0123456789abcdefull};
  write_peft_adapter(dir_ / "out", a.config.lora, "b", a.tensors, DType::F32, files(), base);
  const PeftAdapterConfig back = read_peft_adapter_config(dir_ / "out");
  ASSERT_TRUE(back.base_fingerprint.has_value());
  EXPECT_EQ(*back.base_fingerprint, base);
  EXPECT_TRUE(read_peft_adapter(dir_ / "out", model_).tensors == a.tensors);
  write_file_atomic(dir_ / "out" / kKilnBaseFile, R"({"base_fingerprint": {"bytes": 3}})");
  EXPECT_HAS(error_of([&] { read_peft_adapter_config(dir_ / "out"); }),
             "out/kiln_base.json: expected {\"base_fingerprint\"");
}

// A non-finite value is never written as an adapter: one line naming the tensor, nothing written.
TEST_F(PeftDir, NonFiniteAdaptersAreRefused) {
  PeftAdapter a = read_peft_adapter(kFixture, model_);
  a.tensors.at(1, LoraTarget::kV).b[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_HAS(error_of([&] {
               write_peft_adapter(dir_ / "out", a.config.lora, "", a.tensors, DType::F32, files());
             }),
             "tensor base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight holds nan at "
             "element 5");
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  a.tensors.at(1, LoraTarget::kV).b[5] = 0;
  a.tensors.at(0, LoraTarget::kQ).a[0] = -std::numeric_limits<float>::infinity();
  EXPECT_HAS(error_of([&] { check_lora_finite(a.tensors, 0, "x"); }),
             "x: tensor base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight holds -inf "
             "at element 0");
}

TEST_F(PeftDir, RecipeMustAgreeWithTheAdapter) {
  const PeftAdapterConfig a = read_peft_adapter_config(kFixture);
  LoraConfig lora = a.lora;
  EXPECT_NO_THROW(check_peft_adapter_matches(a, lora, "a.json"));
  lora.dropout = 0.1;  // dropout is not part of the weights
  EXPECT_NO_THROW(check_peft_adapter_matches(a, lora, "a.json"));
  lora.rank = 16;
  EXPECT_EQ(error_of([&] { check_peft_adapter_matches(a, lora, "a.json"); }),
            "a.json: r is 4, but the recipe's lora.rank is 16");
  lora = a.lora;
  lora.alpha = 32;
  EXPECT_EQ(error_of([&] { check_peft_adapter_matches(a, lora, "a.json"); }),
            "a.json: lora_alpha is 8, but the recipe's lora.alpha is 32");
  lora = a.lora;
  lora.targets = {LoraTarget::kQ};
  EXPECT_EQ(error_of([&] { check_peft_adapter_matches(a, lora, "a.json"); }),
            "a.json: target_modules is [q_proj, v_proj], but the recipe's lora.targets is "
            "[q_proj]");
  lora = a.lora;
  lora.rslora = true;
  EXPECT_EQ(error_of([&] { check_peft_adapter_matches(a, lora, "a.json"); }),
            "a.json: use_rslora is false, but the recipe's lora.rslora is true");
}

// A writer that fails leaves nothing: no directory, no temporary; an existing directory stays
// as it was.
TEST_F(PeftDir, FailedWriteLeavesNothing) {
  LoraConfig lora;
  lora.targets = {LoraTarget::kQ};
  LoraTensors t(model_, lora);
  const fs::path out = dir_ / "out";
  LoraConfig zero = lora;
  zero.rank = 0;
  EXPECT_HAS(error_of([&] { write_peft_adapter(out, zero, "", t, DType::F32, files()); }),
             "'rank' must be a positive integer, got 0");
  LoraConfig other = lora;
  other.rank = 16;
  EXPECT_HAS(error_of([&] { write_peft_adapter(out, other, "", t, DType::F32, files()); }),
             "the adapter tensors (rank 8, targets q_proj) are not the LoRA config's (rank 16");
  t.at(1, LoraTarget::kQ).b.pop_back();
  EXPECT_HAS(error_of([&] { write_peft_adapter(out, lora, "", t, DType::F32, files()); }),
             "tensor base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight holds 2047 "
             "values, expected [256, 8] (out, r)");
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, std::set<std::string>{"base"});

  fs::create_directories(out);
  write_file_atomic(out / "keep", "old");
  EXPECT_THROW(write_peft_adapter(out, zero, "", t, DType::F32, files()), Error);
  EXPECT_EQ(read_file(out / "keep"), "old");
}

}  // namespace
}  // namespace kiln
