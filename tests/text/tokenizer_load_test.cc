// Loader errors: each one is a kiln::Error on one line naming the file and the JSON field.
#include <gtest/gtest.h>

#include <functional>

#include "kiln/base/error.h"
#include "text_test_util.h"

namespace kiln {
namespace {

// The tiny tokenizer, edited by `edit`, loaded from a file; returns the error message.
std::string load_error(const std::function<void(Json&)>& edit) {
  Json j = read_json_file(test::kTinyJson);
  edit(j);
  const fs::path dir = test::fresh_temp_dir("kiln_tokenizer_load");
  const fs::path file = dir / "tokenizer.json";
  write_file_atomic(file, j.dump());
  try {
    Tokenizer::load(file);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(file.string() + ": ", 0), 0u) << "does not name the file: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    fs::remove_all(dir);
    return msg.substr(file.string().size() + 2);
  }
  ADD_FAILURE() << "loaded without error";
  return "";
}

TEST(TokenizerLoad, ModelType) {
  EXPECT_EQ(load_error([](Json& j) { j["model"]["type"] = "WordPiece"; }),
            "model.type is 'WordPiece', expected 'BPE'");
  EXPECT_EQ(load_error([](Json& j) { j["model"].erase("type"); }), "model.type is missing");
  EXPECT_EQ(load_error([](Json& j) { j.erase("model"); }), "model is missing");
  EXPECT_EQ(load_error([](Json& j) { j["model"] = 3; }),
            "model is a JSON number, expected an object");
}

TEST(TokenizerLoad, Vocabulary) {
  EXPECT_EQ(load_error([](Json& j) { j["model"].erase("vocab"); }), "model.vocab is missing");
  EXPECT_EQ(load_error([](Json& j) { j["model"]["vocab"] = Json::array(); }),
            "model.vocab is a JSON array, expected an object");
  EXPECT_EQ(load_error([](Json& j) { j["model"]["vocab"]["zz"] = "7"; }),
            "model.vocab[\"zz\"] is a JSON string, expected an integer id");
  EXPECT_EQ(load_error([](Json& j) { j["model"]["vocab"]["zz"] = -3; }),
            "model.vocab[\"zz\"] is -3, outside 0..262808");
  EXPECT_EQ(load_error([](Json& j) { j["model"]["vocab"]["zz"] = 5; }),
            "model.vocab: id 5 is given to both \"&\" and \"zz\"");
}

TEST(TokenizerLoad, Merges) {
  EXPECT_EQ(load_error([](Json& j) { j["model"]["merges"][3] = "in zz"; }),
            "model.merges[3]: token \"zz\" is not in model.vocab");
  EXPECT_EQ(load_error([](Json& j) {
              j["model"]["merges"][0] = Json::array({"q", "z"});
            }),
            "model.merges[0]: the merged token \"qz\" is not in model.vocab");
  EXPECT_EQ(load_error([](Json& j) { j["model"]["merges"][1] = "abc"; }),
            "model.merges[1] is \"abc\", expected two tokens separated by one space");
  EXPECT_EQ(load_error([](Json& j) { j["model"]["merges"][2] = 7; }),
            "model.merges[2] is \"7\", expected \"a b\" or [\"a\", \"b\"]");
  EXPECT_EQ(load_error([](Json& j) { j["model"].erase("merges"); }), "model.merges is missing");
}

TEST(TokenizerLoad, UnsupportedParts) {
  EXPECT_EQ(load_error([](Json& j) {
              j["normalizer"] = {{"type", "NFKC"}};
            }),
            "normalizer.type is 'NFKC'; only NFC (or none) is supported");
  EXPECT_EQ(load_error([](Json& j) { j["model"]["byte_fallback"] = true; }),
            "model.byte_fallback is true; not supported");
  EXPECT_EQ(load_error([](Json& j) { j["model"]["dropout"] = 0.1; }),
            "model.dropout is 0.1; only null or 0 is supported");
  EXPECT_EQ(load_error([](Json& j) {
              j["decoder"] = {{"type", "WordPiece"}};
            }),
            "decoder.type is 'WordPiece', expected 'ByteLevel'");
  EXPECT_EQ(load_error([](Json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }),
            "pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
  EXPECT_EQ(load_error([](Json& j) {
              j["pre_tokenizer"] = {{"type", "Whitespace"}};
            }),
            "pre_tokenizer.type is 'Whitespace'; only Split and ByteLevel are supported");
  EXPECT_EQ(
      load_error([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; }),
      "pre_tokenizer.pretokenizers[0].behavior is 'Sideways', expected Isolated, Removed, "
      "MergedWithPrevious, MergedWithNext or Contiguous");
}

TEST(TokenizerLoad, BadRegex) {
  const std::string msg = load_error(
      [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?i:'s|'t"; });
  EXPECT_EQ(msg.rfind("pre_tokenizer.pretokenizers[0].pattern.Regex: bad regex at offset 9: ", 0),
            0u)
      << msg;
}

TEST(TokenizerLoad, AddedTokens) {
  EXPECT_EQ(load_error([](Json& j) { j["added_tokens"][1].erase("content"); }),
            "added_tokens[1].content is missing");
  EXPECT_EQ(load_error([](Json& j) { j["added_tokens"][1]["special"] = "yes"; }),
            "added_tokens[1].special is a JSON string, expected true or false");
  EXPECT_EQ(load_error([](Json& j) { j["added_tokens"][2]["content"] = "<|im_start|>"; }),
            "added_tokens[2]: \"<|im_start|>\" is added twice");
}

TEST(TokenizerLoad, FilesAndDirectories) {
  const fs::path dir = test::fresh_temp_dir("kiln_tokenizer_dir");
  try {
    Tokenizer::load(dir);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir.string() + ": no tokenizer.json in this directory");
  }
  EXPECT_THROW(Tokenizer::load(dir / "missing.json"), Error);
  fs::copy_file(test::kTinyJson, dir / "tokenizer.json");
  const Tokenizer t = Tokenizer::load(dir);  // a model directory
  EXPECT_EQ(t.source(), (dir / "tokenizer.json").string());
  EXPECT_EQ(t.encode("hello"), test::tiny().encode("hello"));
  write_file_atomic(dir / "tokenizer.json", "{\"model\": ");
  try {
    Tokenizer::load(dir);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: malformed JSON"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// dump() of a 70k-deep value in an error message overflowed the stack; now the parser refuses it.
TEST(TokenizerLoad, DeeplyNestedJson) {
  const fs::path dir = test::fresh_temp_dir("kiln_tokenizer_deep");
  const std::string text = read_file(test::kTinyJson);
  const size_t brace = text.find('{');
  ASSERT_NE(brace, std::string::npos);
  write_file_atomic(dir / "tokenizer.json",
                    text.substr(0, brace + 1) + "\"deep\": " + std::string(70000, '[') +
                        std::string(70000, ']') + ", " + text.substr(brace + 1));
  try {
    Tokenizer::load(dir);
    ADD_FAILURE() << "loaded without error";
  } catch (const Error& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind((dir / "tokenizer.json").string() +
                                        ": malformed JSON: nested deeper than 256 levels at line ",
                                    0),
        0u)
        << e.what();
  }
  fs::remove_all(dir);
}

// Both serialisations of the merges give the same tokenizer.
TEST(TokenizerLoad, MergeForms) {
  Json j = read_json_file(test::kTinyJson);
  ASSERT_TRUE(j["model"]["merges"][0].is_string());
  const Tokenizer strings = Tokenizer::from_json_text(j.dump(), "strings");
  for (Json& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    m = Json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  const Tokenizer pairs = Tokenizer::from_json_text(j.dump(), "pairs");
  for (const std::string& text : test::corpus()) {
    EXPECT_EQ(strings.encode(text), pairs.encode(text));
    EXPECT_EQ(strings.encode(text), test::tiny().encode(text));
  }
}

}  // namespace
}  // namespace kiln
