// The text data formats: the Qwen2.5 chat template byte for byte, piecewise tokenization against
// whole-string tokenization, loss masks token by token, each format, overlong examples, and bad
// lines named by file:line (or skipped and counted).
#include "kiln/data/formats.h"

#include <gtest/gtest.h>

#include <sstream>

#include "data_test_util.h"
#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/data/text_dataset.h"
#include "kiln/text/chat_messages.h"

namespace kiln {
namespace {

using test::kEndOfText;
using test::kImEnd;
using test::kImStart;
using test::qwen;
using Ids = std::vector<int32_t>;
constexpr int32_t X = kIgnoreIndex;

const fs::path kTemplateRef =
    fs::path(KILN_SOURCE_DIR) / "tests/fixtures/data/chat_template_ref.jsonl";

struct RefCase {
  std::vector<ChatMessage> messages;
  std::vector<OrderedJson> tools;
  bool add_generation_prompt;
  std::string rendered;
  std::string line;  // the fixture line: a chat-format line with extra fields
};

// tools/chat_template_ref.py qwen2.5: the Qwen2.5 template rendered by jinja2 as transformers
// sets it up.
std::vector<RefCase> template_refs() {
  std::vector<RefCase> out;
  std::istringstream in(read_file(kTemplateRef));
  for (std::string line; std::getline(in, line);) {
    const OrderedJson j = parse_json_ordered(line, kTemplateRef.string());
    RefCase c;
    c.messages = chat_messages_from_json(j.at("messages"), "messages");
    if (j.contains("tools")) c.tools = chat_tools_from_json(j.at("tools"), "tools");
    c.add_generation_prompt = j.at("add_generation_prompt");
    c.rendered = j.at("rendered");
    c.line = line;
    out.push_back(std::move(c));
  }
  return out;
}

std::string joined(const std::vector<Segment>& segments) {
  std::string s;
  for (const Segment& g : segments) s += g.special >= 0 ? *qwen().token_str(g.special) : g.text;
  return s;
}

Ids ids(std::string_view text) { return qwen().encode(text); }

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Ids masked(const Ids& v) { return Ids(v.size(), X); }

const ChatTemplate& qwen25() { return chat_template(ChatTemplateId::kQwen25); }

std::vector<Segment> segments(const std::vector<ChatMessage>& m, bool train_on_prompt,
                              const std::vector<OrderedJson>& tools = {}) {
  return chat_segments(qwen(), qwen25(), m, tools, {}, train_on_prompt);
}

LineEncoder encoder(DataFormat f, bool train_on_prompt = false) {
  return LineEncoder(f, &qwen(), test::kVocab, train_on_prompt);
}

Json chat_json(const std::vector<ChatMessage>& messages) {
  Json list = Json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return Json{{"messages", list}};
}

TEST(ChatFormat, RenderingMatchesTheQwen25TemplateByteForByte) {
  const std::vector<RefCase> refs = template_refs();
  ASSERT_EQ(refs.size(), 26u);
  for (const RefCase& c : refs) {
    SCOPED_TRACE(c.line);
    EXPECT_EQ(render_chat(qwen25(), c.messages, c.tools,
                          {.add_generation_prompt = c.add_generation_prompt}),
              c.rendered);
    if (c.add_generation_prompt) continue;
    EXPECT_EQ(joined(segments(c.messages, false, c.tools)), c.rendered);
    EXPECT_EQ(joined(segments(c.messages, true, c.tools)), c.rendered);
    // Through the JSONL reader too (the fixture's other fields are ignored).
    EXPECT_EQ(joined(encoder(DataFormat::kChat).segments(c.line, "t:1")), c.rendered);
  }
}

TEST(ChatFormat, PiecewiseTokenizationEqualsTokenizingTheWholeString) {
  int compared = 0;
  const auto check = [&](const std::vector<ChatMessage>& m, bool merges_header) {
    const Example ex = encode_segments(qwen(), segments(m, false));
    const std::string rendered = render_chat(qwen25(), m, {}, {});
    // The same text either way (decode shows it NFC-normalised, as the tokenizer reads it).
    EXPECT_EQ(qwen().decode(ex.input_ids), qwen().decode(ids(rendered)));
    if (merges_header) {
      // A reply that starts with a line break: the whole string merges it with the header's
      // "\n"; piecewise keeps the tokens a model generates after "<|im_start|>assistant\n".
      EXPECT_NE(ex.input_ids, ids(rendered));
    } else {
      EXPECT_EQ(ex.input_ids, ids(rendered)) << rendered;
      ++compared;
    }
  };
  for (const RefCase& c : template_refs()) {
    if (c.add_generation_prompt) continue;
    bool merges = false;
    for (const ChatMessage& m : c.messages) {
      merges |= m.role == "assistant" && m.content.find_first_not_of(" \t") != std::string::npos &&
                (m.content[m.content.find_first_not_of(" \t")] == '\n');
    }
    check(c.messages, merges);
  }
  // Varied content (code, numbers, scripts, emoji, whitespace runs, special-token text) from
  // the tokenizer corpus, as user and assistant turns.
  std::istringstream in(
      read_file(fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/corpus.jsonl"));
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) texts.push_back(parse_json(line, "corpus").at("text"));
  }
  ASSERT_GT(texts.size(), 20u);
  for (size_t i = 0; i + 1 < texts.size(); ++i) {
    std::string reply = texts[i + 1];
    reply.erase(0, reply.find_first_not_of(" \t\r\n\f\v"));  // no leading line break
    check({{"system", texts[(i + 7) % texts.size()]}, {"user", texts[i]}, {"assistant", reply}},
          false);
  }
  EXPECT_GT(compared, 40);
}

TEST(ChatFormat, LossMaskTokenByToken) {
  const std::vector<ChatMessage> m = {{"user", "What is 3 + 4?"},
                                      {"assistant", "3 + 4 = 7."},
                                      {"user", "And 2 + 2?"},
                                      {"assistant", "2 + 2 = 4."}};
  const Example ex = encoder(DataFormat::kChat).encode(chat_json(m).dump(), "t:1");
  const Ids nl = ids("\n");
  const Ids system =
      concat({{kImStart},
              ids("system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
              {kImEnd},
              nl});
  const Ids user1 = concat({{kImStart}, ids("user\nWhat is 3 + 4?"), {kImEnd}, nl});
  const Ids header = concat({{kImStart}, ids("assistant\n")});
  const Ids answer1 = concat({ids("3 + 4 = 7."), {kImEnd}});
  const Ids user2 = concat({{kImStart}, ids("user\nAnd 2 + 2?"), {kImEnd}, nl});
  const Ids answer2 = concat({ids("2 + 2 = 4."), {kImEnd}});
  EXPECT_EQ(ex.input_ids, concat({system, user1, header, answer1, nl, user2, header, answer2, nl}));
  // Only each answer and its <|im_end|> are learnt; not the header, not the "\n" after it.
  EXPECT_EQ(ex.labels, concat({masked(system), masked(user1), masked(header), answer1, masked(nl),
                               masked(user2), masked(header), answer2, masked(nl)}));
  EXPECT_EQ(ids("\n"), Ids{198});
  EXPECT_EQ(ids("assistant\n"), (Ids{77091, 198}));

  // train_on_prompt: everything.
  const Example all = encoder(DataFormat::kChat, true).encode(chat_json(m).dump(), "t:1");
  EXPECT_EQ(all.input_ids, ex.input_ids);
  EXPECT_EQ(all.labels, ex.input_ids);
}

TEST(ChatFormat, OwnSystemPrompt) {
  const Example ex =
      encoder(DataFormat::kChat)
          .encode(
              R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}], "id": 7})",
              "t:1");
  const Ids prompt = concat({{kImStart},
                             ids("system\nBe brief."),
                             {kImEnd},
                             ids("\n"),
                             {kImStart},
                             ids("user\nHi"),
                             {kImEnd},
                             ids("\n"),
                             {kImStart},
                             ids("assistant\n")});
  const Ids answer = concat({ids("Hello."), {kImEnd}});
  EXPECT_EQ(ex.input_ids, concat({prompt, answer, ids("\n")}));
  EXPECT_EQ(ex.labels, concat({masked(prompt), answer, {X}}));
}

TEST(InstructionFormat, RendersAsAChat) {
  const LineEncoder enc = encoder(DataFormat::kInstruction);
  EXPECT_EQ(enc.segments(R"({"instruction": "Add.", "input": "3 and 4", "output": "7"})", "t:1"),
            segments({{"user", "Add.\n\n3 and 4"}, {"assistant", "7"}}, false));
  for (const char* no_input :
       {R"({"instruction": "Add 3 and 4.", "output": "7"})",
        R"({"instruction": "Add 3 and 4.", "input": "", "output": "7"})",
        R"({"instruction": "Add 3 and 4.", "input": null, "output": "7"})"}) {
    EXPECT_EQ(enc.segments(no_input, "t:1"),
              segments({{"user", "Add 3 and 4."}, {"assistant", "7"}}, false));
  }
  const Example ex = enc.encode(R"({"instruction": "Add 3 and 4.", "output": "7"})", "t:1");
  const Ids answer = concat({ids("7"), {kImEnd}});
  ASSERT_GE(ex.input_ids.size(), answer.size() + 1);
  const size_t n = ex.labels.size();
  // The output and its <|im_end|> are learnt, nothing else.
  EXPECT_EQ(Ids(ex.labels.end() - 1 - static_cast<long>(answer.size()), ex.labels.end() - 1),
            answer);
  EXPECT_EQ(ex.labels[n - 1], X);
  for (size_t i = 0; i + 1 + answer.size() < n; ++i) EXPECT_EQ(ex.labels[i], X) << i;
}

TEST(CompletionFormat, PromptMaskedCompletionAndEosLearnt) {
  const Example ex = encoder(DataFormat::kCompletion)
                         .encode(R"({"prompt": "Q: 2+2=", "completion": " 4"})", "t:1");
  EXPECT_EQ(ex.input_ids, concat({ids("Q: 2+2="), ids(" 4"), {kEndOfText}}));
  EXPECT_EQ(ex.labels, concat({masked(ids("Q: 2+2=")), ids(" 4"), {kEndOfText}}));
  const Example all = encoder(DataFormat::kCompletion, true)
                          .encode(R"({"prompt": "Q: 2+2=", "completion": " 4"})", "t:1");
  EXPECT_EQ(all.labels, all.input_ids);
}

TEST(TextFormat, EverythingLearntWithEos) {
  const Example ex = encoder(DataFormat::kText).encode(R"({"text": "Hello world.\n"})", "t:1");
  EXPECT_EQ(ex.input_ids, concat({ids("Hello world.\n"), {kEndOfText}}));
  EXPECT_EQ(ex.labels, ex.input_ids);
  // Special-token text is the special token, as Hugging Face reads it.
  EXPECT_EQ(encoder(DataFormat::kText).encode(R"({"text": "a<|im_end|>"})", "t:1").input_ids,
            concat({ids("a"), {kImEnd}, {kEndOfText}}));
}

TEST(DataFormatNames, RoundTrip) {
  for (const std::string& name : data_format_names()) {
    ASSERT_TRUE(parse_data_format(name).has_value()) << name;
    EXPECT_EQ(data_format_name(*parse_data_format(name)), name);
  }
  EXPECT_FALSE(parse_data_format("csv").has_value());
  EXPECT_EQ(parse_named(kOverlongNames, "drop", "data.overlong"), Overlong::kDrop);
  EXPECT_EQ(parse_named(kOverlongNames, "truncate", "data.overlong"), Overlong::kTruncate);
  EXPECT_FALSE(is_named(kOverlongNames, "wrap"));
}

// read_jsonl's error for `text` in `format`, or "" when it loads.
std::string error_of(DataFormat format, const std::string& text) {
  return test::read_jsonl_error(format, text, "train.jsonl", 1024);
}

TEST(BadLines, ErrorsNameFileLineAndField) {
  const std::string ok =
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"
      "\n";
  const auto chat = [&](const std::string& bad) {
    // Line 1 is fine, line 2 blank, the bad line is line 3.
    return error_of(DataFormat::kChat, ok + "\n" + bad + "\n" + ok);
  };
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "q"}, )"
                 R"({"role": "assistant", "content": "a"}, {"role": "bot", "content": "x"}]})"),
            "train.jsonl:3: messages[2].role is 'bot', expected system, user, assistant or tool");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": 3}]})"),
            "train.jsonl:3: messages[0].content is a JSON number, expected a string or a list of "
            "parts");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user"}]})"),
            "train.jsonl:3: messages[0].content is missing");
  EXPECT_EQ(chat(R"({"messages": [{"content": "x"}]})"),
            "train.jsonl:3: messages[0].role is missing");
  EXPECT_EQ(chat(R"({"messages": [{"role": 1, "content": "x"}]})"),
            "train.jsonl:3: messages[0].role is a JSON number, expected a string");
  EXPECT_EQ(chat(R"({"messages": ["hi"]})"),
            "train.jsonl:3: messages[0] is a JSON string, expected an object");
  EXPECT_EQ(chat(R"({"messages": []})"),
            "train.jsonl:3: messages: expected a non-empty list of messages, got []");
  EXPECT_EQ(chat(R"({"text": "x"})"), "train.jsonl:3: missing field 'messages'");
  EXPECT_EQ(chat(R"([1, 2])"), "train.jsonl:3: expected a JSON object, got [1,2]");
  EXPECT_HAS(chat(R"({"messages": [{"role": "user", "content": "q"}]})"),
             "train.jsonl:3: messages: no assistant message");
  EXPECT_HAS(chat(R"({"messages": )"), "train.jsonl:3: malformed JSON");
  EXPECT_HAS(chat("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}"),
             "train.jsonl:3: malformed JSON");  // invalid UTF-8
  EXPECT_HAS(chat("{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\"}]}"),
             "train.jsonl:3: malformed JSON");  // truncated UTF-8 sequence

  EXPECT_EQ(error_of(DataFormat::kInstruction, R"({"instruction": "x"})"),
            "train.jsonl:1: missing field 'output'");
  EXPECT_EQ(error_of(DataFormat::kInstruction, R"({"instruction": "x", "input": 5, "output": ""})"),
            "train.jsonl:1: input: expected a string, got 5");
  EXPECT_EQ(error_of(DataFormat::kCompletion, R"({"prompt": "x", "completion": null})"),
            "train.jsonl:1: completion: expected a string, got null");
  EXPECT_EQ(error_of(DataFormat::kText, R"({"text": ""})"),
            "train.jsonl:1: text: expected a non-empty string");
  EXPECT_EQ(error_of(DataFormat::kText, R"({"txt": "a"})"), "train.jsonl:1: missing field 'text'");
  EXPECT_EQ(error_of(DataFormat::kText, "\n \n"), "train.jsonl: no examples");
  EXPECT_EQ(error_of(DataFormat::kTokens, R"({"input_ids": [1, 2, 999999]})"),
            "train.jsonl:1: input_ids[2]: token id 999999 is out of range for vocab_size 151936");
  // A chat without an assistant turn is fine when the prompt is learnt too.
  EXPECT_NO_THROW(read_jsonl(R"({"messages": [{"role": "user", "content": "q"}]})", "t",
                             encoder(DataFormat::kChat, true), 64, Overlong::kTruncate, false));
}

TEST(BadLines, SkippedAndCounted) {
  const std::string text =
      "{\"text\": \"one\"}\n"
      "not json\n"
      "{\"text\": 1}\n"
      "\n"
      "{\"text\": \"two\"}\n"
      "{\"text\": \"bad \xff utf-8\"}\n";
  const LineEncoder enc = encoder(DataFormat::kText);
  EXPECT_THROW(read_jsonl(text, "t", enc, 64, Overlong::kTruncate, false), Error);
  const TokenizedDataset d = read_jsonl(text, "t", enc, 64, Overlong::kTruncate, true);
  EXPECT_EQ(d.stats().lines, 5);
  EXPECT_EQ(d.stats().skipped, 3);
  EXPECT_EQ(d.stats().examples, 2);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(Ids(d.example(0).input_ids.begin(), d.example(0).input_ids.end()),
            concat({ids("one"), {kEndOfText}}));
  EXPECT_EQ(Ids(d.example(1).input_ids.begin(), d.example(1).input_ids.end()),
            concat({ids("two"), {kEndOfText}}));
  // Nothing left is still an error.
  EXPECT_EQ(
      [&] {
        try {
          read_jsonl("x\ny\n", "t", enc, 64, Overlong::kTruncate, true);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      "t: no examples (2 bad lines skipped)");
}

TEST(Overlong, TruncateOrDropWithCounts) {
  // Examples of 2, 5 and 9 tokens (text + eos), in file order.
  std::string text;
  std::vector<Ids> full;
  for (const char* t : {"a", "b b b b", "c c c c c c c c"}) {
    text += Json{{"text", t}}.dump() + "\n";
    full.push_back(concat({ids(t), {kEndOfText}}));
  }
  ASSERT_EQ(full[0].size(), 2u);
  ASSERT_EQ(full[1].size(), 5u);
  ASSERT_EQ(full[2].size(), 9u);
  const LineEncoder enc = encoder(DataFormat::kText);

  const TokenizedDataset cut = read_jsonl(text, "t", enc, 5, Overlong::kTruncate, false);
  EXPECT_EQ(cut.stats().examples, 3);
  EXPECT_EQ(cut.stats().truncated, 1);
  EXPECT_EQ(cut.stats().dropped, 0);
  EXPECT_EQ(cut.stats().tokens, 2 + 5 + 5);
  EXPECT_EQ(cut.stats().targets, 1 + 4 + 4);
  EXPECT_EQ(Ids(cut.example(2).input_ids.begin(), cut.example(2).input_ids.end()),
            Ids(full[2].begin(), full[2].begin() + 5));

  const TokenizedDataset drop = read_jsonl(text, "t", enc, 5, Overlong::kDrop, false);
  EXPECT_EQ(drop.stats().examples, 2);
  EXPECT_EQ(drop.stats().truncated, 0);
  EXPECT_EQ(drop.stats().dropped, 1);
  EXPECT_EQ(drop.stats().tokens, 2 + 5);
  EXPECT_EQ(drop.stats().lines, 3);

  // A chat cut before its answer keeps the example but reports it has nothing to learn.
  const std::string chat =
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})";
  const TokenizedDataset c =
      read_jsonl(chat, "t", encoder(DataFormat::kChat), 8, Overlong::kTruncate, false);
  EXPECT_EQ(c.stats().no_target, 1);
  EXPECT_EQ(c.stats().targets, 0);
}

TEST(TokensFormat, ThroughTheSameReader) {
  const LineEncoder enc(DataFormat::kTokens, nullptr, 100, false);
  const TokenizedDataset d =
      read_jsonl("{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2, 3]}\n\n{\"input_ids\": [4]}\n",
                 "t", enc, 8, Overlong::kTruncate, false);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(Ids(d.example(0).labels.begin(), d.example(0).labels.end()), (Ids{X, 2, 3}));
  EXPECT_EQ(Ids(d.example(1).input_ids.begin(), d.example(1).input_ids.end()), (Ids{4}));
  EXPECT_EQ(d.stats().targets, 2);
  EXPECT_EQ(d.stats().max_id, 4);
}

TEST(ReadJsonl, ManyLinesKeepFileOrder) {
  // More lines than one parallel block: results come back in line order.
  std::string text;
  for (int i = 0; i < 10000; ++i) text += Json{{"text", std::to_string(i)}}.dump() + "\n";
  const TokenizedDataset d =
      read_jsonl(text, "t", encoder(DataFormat::kText), 64, Overlong::kTruncate, false);
  ASSERT_EQ(d.size(), 10000u);
  for (int i : {0, 1, 4095, 4096, 4097, 9999}) {
    const ExampleView ex = d.example(static_cast<size_t>(i));
    EXPECT_EQ(qwen().decode(ex.input_ids), std::to_string(i) + "<|endoftext|>");
  }
}

}  // namespace
}  // namespace kiln
