// kiln tokenize / kiln detokenize: text to token ids and back, on stdin and stdout, with the
// tokenizer of a Hugging Face model (its tokenizer.json). `kiln tokenize --show-loss` renders
// training records instead, marking the tokens that take loss (the masks training uses).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/base/json.h"
#include "kiln/cli/chat_options.h"
#include "kiln/cli/commands.h"
#include "kiln/data/formats.h"
#include "kiln/data/preference_pairs.h"
#include "kiln/data/source_lines.h"
#include "kiln/data/text_dataset.h"
#include "kiln/text/chat_messages.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/chat_template_choice.h"
#include "kiln/text/tokenizer.h"

namespace kiln::cli {
namespace {

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Calls f(line_number, line) for each line that is not blank; a trailing \r is dropped.
template <typename F>
void for_each_line(std::string_view input, F&& f) {
  size_t number = 0;
  while (!input.empty()) {
    const size_t end = input.find('\n');
    std::string_view line = input.substr(0, end);
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + 1);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    f(number, line);
  }
}

void write_ids(std::string& out, const std::vector<int32_t>& ids) {
  fmt::format_to(std::back_inserter(out), "[{}]\n", fmt::join(ids, ","));
}

void flush(std::string& out) {
  std::fwrite(out.data(), 1, out.size(), stdout);
  out.clear();
}

// Rethrows a failure as "<where>: <what went wrong>", where is "stdin" or "stdin:N", after
// writing out what the lines before it gave.
template <typename F>
void in_context(const std::string& where, std::string& out, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    flush(out);
    const std::string msg = e.what();
    // parse_json already put the line's name in front.
    fail("{}", msg.rfind(where + ": ", 0) == 0 ? msg : where + ": " + msg);
  }
}

// A --jsonl line's text, and whether it is a record of the text data format ({"text": ...}),
// which gets the post-processor's tokens as training and Hugging Face's tokenizer(text) give
// them (Llama 3's <|begin_of_text|>; none for Qwen).
struct JsonlText {
  std::string text;
  bool record = false;
};

JsonlText text_of(const Json& j) {
  if (j.is_string()) return {j.get<std::string>(), false};
  if (j.is_object()) {
    const auto it = j.find("text");
    if (it != j.end() && it->is_string()) return {it->get<std::string>(), true};
  }
  fail("expected a JSON string or an object with a \"text\" string");
}

// How --show-loss marks the spans whose tokens take loss: ANSI colour on a terminal, else
// brackets.
struct LossMarks {
  std::string open, close;
  static LossMarks for_stdout() {
    if (::isatty(STDOUT_FILENO) != 0) return {"\033[1;32m", "\033[0m"};
    return {"[[", "]]"};
  }
};

// One sequence as training sees it: its text decoded span by span, each run of tokens that take
// loss between the marks, then a count line naming `what`.
void show_sequence(std::string& out, const Tokenizer& tok, ExampleView ex, const std::string& what,
                   const LossMarks& marks) {
  size_t learnt = 0;
  for (size_t begin = 0; begin < ex.size();) {
    const bool loss = ex.labels[begin] != kIgnoreIndex;
    size_t end = begin;
    while (end < ex.size() && (ex.labels[end] != kIgnoreIndex) == loss) ++end;
    const std::string text = tok.decode(ex.input_ids.subspan(begin, end - begin));
    out += loss ? marks.open + text + marks.close : text;
    if (loss) learnt += end - begin;
    begin = end;
  }
  if (out.empty() || out.back() != '\n') out += '\n';
  fmt::format_to(std::back_inserter(out), "# {}: {} of {} tokens take loss\n", what, learnt,
                 ex.size());
}

// One record as training sees it (LineEncoder: the same segments, tokens and labels); a
// preference pair as its two sequences, the chosen then the rejected.
void show_loss(std::string& out, const Tokenizer& tok, const LineEncoder& encoder,
               std::string_view line, const std::string& where, TextPosition origin,
               const LossMarks& marks) {
  const Example ex = encoder.encode(line, where, origin);
  if (encoder.format() != DataFormat::kPreference) {
    show_sequence(out, tok, ex.view(), where, marks);
    return;
  }
  const auto [chosen, rejected] = pair_sequences(ex.view());
  show_sequence(out, tok, chosen, where + " chosen", marks);
  show_sequence(out, tok, rejected, where + " rejected", marks);
}

}  // namespace

Command add_tokenize(CLI::App& app) {
  struct Opts {
    std::string tokenizer, format, chat_template, enable_thinking;
    bool jsonl = false, chat = false, no_special = false, add_special_tokens = false,
         show_loss = false, train_on_prompt = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "tokenize", "Encode stdin into token ids, printed as JSON arrays (one per line)");
  sub->add_option("--tokenizer", o->tokenizer, "A tokenizer.json, or a model directory with one")
      ->required();
  auto* jsonl = sub->add_flag(
      "--jsonl", o->jsonl,
      "Each stdin line is a JSON string or {\"text\": ...}; one array per line (blank lines are "
      "skipped). A {\"text\": ...} record is encoded as training and Hugging Face's "
      "tokenizer(text) encode it, with the post-processor's tokens (Llama 3's "
      "<|begin_of_text|>); a string as the text alone. Without it, all of stdin is one text");
  auto* chat =
      sub->add_flag("--chat", o->chat,
                    "Each stdin line is {\"messages\": [{\"role\", \"content\", \"tool_calls\", "
                    "\"reasoning_content\"}...], \"tools\": [...], \"add_generation_prompt\": "
                    "bool, \"enable_thinking\": bool, \"date_string\": \"...\"}, rendered with "
                    "the chat template as training renders it")
          ->excludes(jsonl);
  add_chat_template_options(
      sub, o->chat_template, o->enable_thinking, "With --chat or --show-loss: ",
      "the chat template in the tokenizer_config.json beside --tokenizer, when kiln knows it");
  sub->add_flag("--add-special-tokens", o->add_special_tokens,
                "Add the tokenizer's post-processor tokens as Hugging Face's tokenizer(text) does "
                "(Llama 3's <|begin_of_text|>; none for Qwen); a {\"text\": ...} line of --jsonl "
                "always has them")
      ->excludes(chat);
  auto* no_special = sub->add_flag(
      "--no-special", o->no_special,
      "Encode special-token text (<|im_start|>, ...) as plain text; with --chat, only in message "
      "contents");
  auto* show = sub->add_flag(
      "--show-loss", o->show_loss,
      "Each stdin line (or element of a JSON array) is a training record in --format (default "
      "chat); print its text as training renders it, the tokens that take loss in colour on a "
      "terminal, else between [[ and ]], and a line counting them");
  show->excludes(jsonl)->excludes(no_special);
  sub->add_option(
         "--format", o->format,
         "With --show-loss: the records' data format, " + data_format_choices() + " (default chat)")
      ->needs(show);
  sub->add_flag("--train-on-prompt", o->train_on_prompt,
                "With --show-loss: loss on every token, as data.train_on_prompt")
      ->needs(show);
  return {sub, [o] {
            const Tokenizer tok = Tokenizer::load(o->tokenizer);
            const bool parse_special = !o->no_special;
            const auto encode = [&](std::string_view text) {
              return o->add_special_tokens ? tok.encode_with_special_tokens(text, parse_special)
                                           : tok.encode(text, parse_special);
            };
            // Chosen before stdin is read: a template kiln does not know fails at once.
            const ChatTemplate* tmpl = nullptr;
            ChatOptions options;
            if (!o->chat && !o->show_loss &&
                (!o->chat_template.empty() || !o->enable_thinking.empty())) {
              fail("--template and --enable-thinking need --chat or --show-loss");
            }
            if (!o->enable_thinking.empty()) options.enable_thinking = o->enable_thinking == "true";
            if (o->chat) {
              tmpl = &choose_chat_template(o->tokenizer, o->chat_template, "--template");
              check_enable_thinking(*tmpl, options.enable_thinking, "--enable-thinking");
            }
            const std::string input = read_stdin();
            std::string out;
            if (o->show_loss) {
              const std::string name = o->format.empty() ? "chat" : o->format;
              const auto format = parse_data_format(name);
              if (!format || *format == DataFormat::kTokens) {
                fail("--format: '{}' is not a text data format ({})", name, data_format_choices());
              }
              if (o->chat && *format != DataFormat::kChat) {
                fail("--chat reads chat records; drop it to show --format {}", name);
              }
              // The template as training chooses it for this format (none for text, completion).
              DataOptions d;
              d.format = *format;
              d.tokenizer = o->tokenizer;
              d.chat_template = o->chat_template;
              d.template_key = "--template";
              d.enable_thinking = options.enable_thinking;
              d.thinking_key = "--enable-thinking";
              const LineEncoder encoder(*format, &tok, tok.vocab_size(), o->train_on_prompt,
                                        data_chat_template(d), options);
              const LossMarks marks = LossMarks::for_stdout();
              // JSONL, or a JSON array of records, as a data file is read.
              for (const SourceLine& rec : source_lines(input, "stdin")) {
                const std::string where = fmt::format("stdin:{}", rec.number);
                in_context(where, out, [&] {
                  show_loss(out, tok, encoder, rec.text, where, rec.position(), marks);
                });
                if (out.size() > (1 << 20)) flush(out);
              }
              flush(out);
              return 0;
            }
            if (!o->jsonl && !o->chat) {
              in_context("stdin", out, [&] { write_ids(out, encode(input)); });
              flush(out);
              return 0;
            }
            for_each_line(input, [&](size_t number, std::string_view line) {
              const std::string where = fmt::format("stdin:{}", number);
              in_context(where, out, [&] {
                if (o->jsonl) {
                  const JsonlText t = text_of(parse_json(line, where));
                  write_ids(out, t.record ? tok.encode_with_special_tokens(t.text, parse_special)
                                          : encode(t.text));
                  return;
                }
                // Ordered: tools and tool-call arguments render with their keys as given.
                const OrderedJson j = parse_json_ordered(line, where);
                if (!j.is_object()) fail("expected an object with \"messages\"");
                const auto msgs = j.find("messages");
                if (msgs == j.end()) fail("\"messages\" is missing");
                ChatOptions line_options = options;
                if (const auto g = j.find("add_generation_prompt"); g != j.end()) {
                  if (!g->is_boolean()) fail("\"add_generation_prompt\" is not true or false");
                  line_options.add_generation_prompt = g->get<bool>();
                }
                if (const auto e = j.find("enable_thinking"); e != j.end()) {
                  if (!e->is_boolean()) fail("\"enable_thinking\" is not true or false");
                  line_options.enable_thinking = e->get<bool>();
                }
                if (const auto d = j.find("date_string"); d != j.end()) {
                  if (!d->is_string()) fail("\"date_string\" is not a string");
                  line_options.date_string = d->get<std::string>();
                }
                std::vector<OrderedJson> tools;
                if (const auto t = j.find("tools"); t != j.end()) {
                  tools = chat_tools_from_json(*t, "tools");
                }
                write_ids(out, encode_chat(tok, *tmpl, chat_messages_from_json(*msgs, "messages"),
                                           tools, line_options, parse_special));
              });
              if (out.size() > (1 << 20)) flush(out);
            });
            flush(out);
            return 0;
          }};
}

Command add_detokenize(CLI::App& app) {
  struct Opts {
    std::string tokenizer;
    bool skip_special = false, jsonl = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "detokenize", "Decode JSON arrays of token ids (one per stdin line) back into text");
  sub->add_option("--tokenizer", o->tokenizer, "A tokenizer.json, or a model directory with one")
      ->required();
  sub->add_flag("--skip-special", o->skip_special, "Leave special tokens out of the text");
  sub->add_flag("--jsonl", o->jsonl,
                "Print each text as a JSON line {\"text\": ...} instead of the raw text followed "
                "by a newline");
  return {sub, [o] {
            const Tokenizer tok = Tokenizer::load(o->tokenizer);
            const std::string input = read_stdin();
            std::string out;
            for_each_line(input, [&](size_t number, std::string_view line) {
              const std::string where = fmt::format("stdin:{}", number);
              in_context(where, out, [&] {
                const Json j = parse_json(line, where);
                if (!j.is_array()) fail("expected a JSON array of token ids");
                std::vector<int32_t> ids;
                ids.reserve(j.size());
                for (const Json& id : j) {
                  if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN ||
                      id.get<int64_t>() > INT32_MAX) {
                    fail("expected a JSON array of token ids, found {}", id.dump());
                  }
                  ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
                }
                const std::string text = tok.decode(ids, o->skip_special);
                if (o->jsonl) {
                  out += Json{{"text", text}}.dump();
                } else {
                  out += text;
                }
                out += '\n';
              });
              if (out.size() > (1 << 20)) flush(out);
            });
            flush(out);
            return 0;
          }};
}

}  // namespace kiln::cli
