// The chat template a model directory kiln writes carries: the base's own, byte for byte, or,
// when the base has none, the published text of the template the run chose.
#include "kiln/model/hf_model_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/chat_template_choice.h"

namespace kiln {
namespace {

const fs::path kLlamaTokenizer =
    fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/llama3_tiny_tokenizer.json";

class HfModelFilesTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "base");
    write_file_atomic(dir_ / "base/config.json",
                      R"({"model_type": "llama", "vocab_size": 128256})");
    fs::copy_file(kLlamaTokenizer, dir_ / "base/tokenizer.json");
  }

  Json written(const std::string& chat_template) {
    HfModelFiles::read(dir_ / "base", {}, chat_template).write(dir_ / "out", "float32");
    return parse_json(read_file(dir_ / "out/tokenizer_config.json"), "out");
  }

  testing::TempDir tmp_{"kiln_hf_files"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(HfModelFilesTemplate, BaseWithoutAnyGetsTheChosenOne) {
  const Json cfg = written("llama3");
  EXPECT_EQ(cfg.at("chat_template"), chat_template(ChatTemplateId::kLlama3).jinja());
  EXPECT_EQ(cfg.at("bos_token"), "<|begin_of_text|>");  // the template renders {{ bos_token }}
  EXPECT_EQ(cfg.at("eos_token"), "<|eot_id|>");
  EXPECT_EQ(cfg.at("tokenizer_class"), "PreTrainedTokenizerFast");
  // The directory written is one kiln recognises as the same template.
  EXPECT_EQ(model_chat_template(dir_ / "out").known, ChatTemplateId::kLlama3);
  const Json gen = parse_json(read_file(dir_ / "out/generation_config.json"), "gen");
  EXPECT_EQ(gen.at("eos_token_id"), 128009);
}

TEST_F(HfModelFilesTemplate, ConfigWithoutTemplateGainsTheChosenOne) {
  write_file_atomic(dir_ / "base/tokenizer_config.json", R"({"model_max_length": 7})");
  const Json cfg = written("qwen3");
  EXPECT_EQ(cfg.at("model_max_length"), 7);
  EXPECT_EQ(cfg.at("chat_template"), chat_template(ChatTemplateId::kQwen3).jinja());
  // data.template empty: kiln's default.
  EXPECT_EQ(written("").at("chat_template"), chat_template(ChatTemplateId::kQwen25).jinja());
}

TEST_F(HfModelFilesTemplate, BaseTemplateIsKeptByteForByte) {
  const std::string own = "{\"chat_template\": \"{{ messages }}\", \"x\": 1}\n";
  write_file_atomic(dir_ / "base/tokenizer_config.json", own);
  written("llama3");
  EXPECT_EQ(read_file(dir_ / "out/tokenizer_config.json"), own);
  EXPECT_THROW(written("chatml"), Error);
}

}  // namespace
}  // namespace kiln
