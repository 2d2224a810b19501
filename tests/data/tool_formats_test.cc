// Tool calling in training data (loss on the assistant's tool-call text and <|im_end|>, never on
// tool results), the sharegpt format, instruction's system and history fields, JSON-array files,
// and one-line errors naming file, line and field for what the template cannot render.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/data/formats.h"
#include "kiln/data/source_lines.h"
#include "kiln/data/text_dataset.h"

namespace kiln {
namespace {

using test::kImEnd;
using test::kImStart;
using test::qwen;
using Ids = std::vector<int32_t>;

LineEncoder encoder(DataFormat f) { return LineEncoder(f, &qwen(), test::kVocab, false); }

Ids ids(std::string_view text) { return qwen().encode(text); }

// The learnt tokens of an example, decoded in runs: each run of consecutive learnt tokens.
std::vector<std::string> learnt_runs(const Example& ex) {
  std::vector<std::string> runs;
  Ids run;
  for (size_t i = 0; i <= ex.labels.size(); ++i) {
    if (i < ex.labels.size() && ex.labels[i] != kIgnoreIndex) {
      run.push_back(ex.labels[i]);
    } else if (!run.empty()) {
      runs.push_back(qwen().decode(run));
      run.clear();
    }
  }
  return runs;
}

const char* kToolChat =
    R"({"messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
        {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "content": "rain"},
      {"role": "assistant", "content": "Rain."}],
     "tools": [{"type": "function", "function": {"name": "get_weather"}}]})";

TEST(ToolChat, LossOnToolCallTextAndImEndOnly) {
  std::string line = kToolChat;
  std::replace(line.begin(), line.end(), '\n', ' ');
  const Example ex = encoder(DataFormat::kChat).encode(line, "t:1");
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
      "</tool_call><|im_end|>";
  EXPECT_EQ(learnt_runs(ex), (std::vector<std::string>{call, "Rain.<|im_end|>"}));
  // The tokens are those of the whole rendered string.
  EXPECT_NE(qwen().decode(ex.input_ids).find("<tools>\n{\"type\": \"function\""),
            std::string::npos);
  EXPECT_NE(qwen().decode(ex.input_ids).find("<|im_start|>user\n<tool_response>\nrain\n"),
            std::string::npos);
}

TEST(ShareGpt, EqualsTheSameChat) {
  const std::string sharegpt =
      R"({"system": "Be kind.", "tools": "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]",
          "conversations": [{"from": "human", "value": "q"},
          {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {\"x\": 1}}"},
          {"from": "observation", "value": "r"}, {"from": "gpt", "value": "a"}]})";
  const std::string chat =
      R"({"tools": [{"type": "function", "function": {"name": "f"}}], "messages": [
          {"role": "system", "content": "Be kind."}, {"role": "user", "content": "q"},
          {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {"x": 1}}]},
          {"role": "tool", "content": "r"}, {"role": "assistant", "content": "a"}]})";
  const auto flat = [](std::string s) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
  };
  const Example a = encoder(DataFormat::kShareGpt).encode(flat(sharegpt), "t:1");
  const Example b = encoder(DataFormat::kChat).encode(flat(chat), "t:1");
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(learnt_runs(a).size(), 2u);
  // A system turn first, and user/assistant spelled as in chat, work too.
  const Example c = encoder(DataFormat::kShareGpt)
                        .encode(R"({"conversations": [{"from": "system", "value": "S"},
                                 {"from": "user", "value": "u"}, {"from": "assistant",
                                 "value": "v"}]})",
                                "t:1");
  EXPECT_EQ(c.input_ids, ids("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu<|im_end|>\n"
                             "<|im_start|>assistant\nv<|im_end|>\n"));
}

TEST(Instruction, SystemAndHistoryBecomeTurns) {
  const Example ex = encoder(DataFormat::kInstruction)
                         .encode(R"({"system": "S", "history": [["q1", "a1"], ["q2", "a2"]],
                                  "instruction": "q3", "input": "in", "output": "a3"})",
                                 "t:1");
  EXPECT_EQ(ex.input_ids,
            ids("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n<|im_start|>"
                "assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant"
                "\na2<|im_end|>\n<|im_start|>user\nq3\n\nin<|im_end|>\n<|im_start|>assistant\n"
                "a3<|im_end|>\n"));
  EXPECT_EQ(learnt_runs(ex),
            (std::vector<std::string>{"a1<|im_end|>", "a2<|im_end|>", "a3<|im_end|>"}));
}

// read_jsonl's error for `text` in `format`, or "" when it loads.
std::string error_of(DataFormat format, const std::string& text) {
  return test::read_jsonl_error(format, text, "train.json", 4096);
}

TEST(JsonArrayFile, ElementsAreRecordsNamedByTheirLine) {
  const std::string file =
      "[\n  {\"instruction\": \"a [b], {c}\", \"output\": \"x\\\"]\"},\n"
      "  {\"instruction\": \"d\",\n   \"output\": \"y\"}\n]\n";
  const std::vector<SourceLine> lines = source_lines(file, "train.json");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].number, 2u);
  EXPECT_EQ(lines[0].text, "{\"instruction\": \"a [b], {c}\", \"output\": \"x\\\"]\"}");
  EXPECT_EQ(lines[1].number, 3u);
  const TokenizedDataset d = read_jsonl(file, "train.json", encoder(DataFormat::kInstruction), 4096,
                                        Overlong::kTruncate, false);
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(source_lines("[]", "f").size(), 0u);
  EXPECT_EQ(error_of(DataFormat::kInstruction,
                     "[\n{\"instruction\": \"a\", \"output\": \"b\"},\n\n{\"instruction\": 1}]"),
            "train.json:4: instruction: expected a string, got 1");
  EXPECT_EQ(error_of(DataFormat::kInstruction, "[{\"instruction\": \"a\"} {}]"),
            "train.json:1: malformed JSON array: expected ',' or ']' after element 0");
  EXPECT_EQ(error_of(DataFormat::kInstruction, "[{\"instruction\": \"a\"},\n"),
            "train.json:2: malformed JSON array: unexpected end of file");
  EXPECT_EQ(error_of(DataFormat::kInstruction, "[]\nx"),
            "train.json:2: unexpected text after the JSON array");
}

TEST(ToolErrors, NameFileLineAndField) {
  const auto chat = [](const std::string& messages) {
    return error_of(DataFormat::kChat, "{\"messages\": " + messages + "}");
  };
  EXPECT_EQ(chat(R"([{"role": "user", "content": "q", "weight": 1}])"),
            "train.json:1: messages[0].weight is not supported (kiln's chat templates render "
            "role, content)");
  EXPECT_EQ(chat(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}])"),
            "train.json:1: messages[0].tool_calls[0].function.arguments is missing");
  EXPECT_EQ(chat(R"([{"role": "assistant", "tool_calls": [{"name": "f", "arguments": "{x"}]}])")
                .rfind("train.json:1: messages[0].tool_calls[0].arguments is a string but not "
                       "JSON",
                       0),
            0u);
  EXPECT_EQ(chat(R"([{"role": "assistant", "tool_calls": [{"name": "f", "arguments": "[1]"}]}])"),
            "train.json:1: messages[0].tool_calls[0].arguments is a JSON string holding a "
            "array, expected an object");
  EXPECT_EQ(chat(R"([{"role": "user", "content": [{"type": "image", "image": "x.png"}]}])"),
            "train.json:1: messages[0].content[0].image is not supported (kiln's chat templates "
            "render type, text)");
  EXPECT_EQ(chat(R"([{"role": "user", "content": [{"type": "image"}]}])"),
            "train.json:1: messages[0].content[0].type is 'image', expected text");
  EXPECT_EQ(chat(R"([{"role": "assistant", "content": null}])"),
            "train.json:1: messages[0].content is missing");
  EXPECT_EQ(chat(R"([{"role": "user", "content": "q"}], "tools": {"a": 1})"),
            "train.json:1: tools is a JSON object, expected an array");
  EXPECT_EQ(
      error_of(DataFormat::kShareGpt, R"({"conversations": [{"from": "bot", "value": "x"}]})"),
      "train.json:1: conversations[0].from: expected system, human, gpt, function_call, "
      "observation or tool, got 'bot'");
  EXPECT_EQ(error_of(DataFormat::kShareGpt,
                     R"({"conversations": [{"from": "human", "value": "x", "lang": "en"}]})"),
            "train.json:1: conversations[0].lang: not supported (a turn has from and value)");
  EXPECT_EQ(
      error_of(DataFormat::kShareGpt,
               R"j({"conversations": [{"from": "function_call", "value": "f(1)"}]})j")
          .rfind("train.json:1: conversations[0].value: a function_call value must be JSON", 0),
      0u);
  EXPECT_EQ(error_of(DataFormat::kShareGpt,
                     R"({"conversations": [{"from": "human", "value": "x"}, )"
                     R"({"from": "system", "value": "late"}, {"from": "gpt", "value": "y"}]})"),
            "train.json:1: conversations[1].from: system is only allowed as the first turn");
  EXPECT_EQ(error_of(DataFormat::kInstruction,
                     R"({"instruction": "x", "output": "y", "history": [["q"]]})"),
            "train.json:1: history[0]: expected [question, answer] (two strings), got [\"q\"]");
}

}  // namespace
}  // namespace kiln
