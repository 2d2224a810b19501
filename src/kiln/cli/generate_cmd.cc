// kiln generate: text from a model directory, streamed to stdout token by token. Incremental
// decoding with a KV cache (model/generate.h); greedy or temperature + top-p sampling
// (model/sampling.h); stops at the chat template's end tokens (<|im_end|> and <|endoftext|>
// for Qwen, <|eot_id|>, <|eom_id|> and <|end_of_text|> for Llama 3) or --max-new-tokens. A plain
// prompt is encoded as Hugging Face's tokenizer(text) encodes it (Llama 3's <|begin_of_text|>
// first), a chat one with the template (text/chat_template_choice.h), which renders its own.
// It ends with the reason on stderr ("stop: end token <|im_end|> after 12 new tokens",
// "stop: length (--max-new-tokens 32) after 32 new tokens"). --adapter applies a PEFT adapter
// directory, or a LoRA run's checkpoint, to the model; --model may be a run or checkpoint too, a
// LoRA run's bringing its base and adapters (train/checkpoint_model.h): decoding runs base +
// adapters, unmerged.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/cli/chat_options.h"
#include "kiln/cli/commands.h"
#include "kiln/cli/model_options.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/generate.h"
#include "kiln/model/sampling.h"
#include "kiln/model_files/adapted_model.h"
#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/text/chat_messages.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/chat_template_choice.h"
#include "kiln/text/token_stream.h"
#include "kiln/text/tokenizer.h"
#include "kiln/train/checkpoint_model.h"

namespace kiln::cli {
namespace {

struct GenerateOpts {
  std::string model, adapter, tokenizer, prompt, system, tools_file, chat_template, enable_thinking,
      date_string;
  bool chat = false, interactive = false, has_prompt = false, allow_other_base = false;
  int max_new_tokens = 256;
  double temperature = 0.7, top_p = 0.8;  // Qwen2.5-Instruct's generation_config
  uint64_t seed = 0;
};

void write_out(const std::string& s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// A model, its KV cache and the ids the cache holds, so that a prompt sharing a prefix with
// them (the history of a chat) runs only its new tokens.
class Session {
 public:
  Session(const GenerateOpts& o, const Tokenizer& tok, const AdaptedModel& model,
          ParamStore& params, const Backend& backend, std::vector<int32_t> stops)
      : o_(o),
        tok_(tok),
        gen_(model.config, params, backend, model.inference_lora()),
        sampler_({o.temperature, o.top_p}, o.seed),
        // Ids the model has but the tokenizer lacks (Qwen pads its embedding to a multiple of
        // 128) cannot be decoded, so they are never sampled.
        sample_vocab_(static_cast<size_t>(std::min(model.config.vocab_size, tok.vocab_size()))),
        stops_(std::move(stops)) {
    // Nor are ids in a gap of the tokenizer's own range (none in the published Qwen and Llama
    // tokenizers; a tokenizer with added tokens far above its vocabulary has them).
    for (size_t id = 0; id < sample_vocab_; ++id) {
      if (!tok.token_str(static_cast<int32_t>(id))) gaps_.push_back(static_cast<int32_t>(id));
    }
  }

  // Runs `prompt`, then samples, writing text to stdout as it comes, and a newline at the end.
  // Returns the generated ids, without the stop token.
  std::vector<int32_t> respond(const std::vector<int32_t>& prompt) {
    const auto t0 = std::chrono::steady_clock::now();
    // Reuse the cached prefix, but always run at least one token for fresh logits.
    size_t common = 0;
    while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common]) {
      ++common;
    }
    common = std::min(common, prompt.size() - 1);
    gen_.truncate(static_cast<int>(common));
    cached_.resize(common);
    std::span<const float> logits = gen_.prefill(std::span<const int32_t>(prompt).subspan(common));
    cached_.insert(cached_.end(), prompt.begin() + static_cast<ptrdiff_t>(common), prompt.end());
    const auto t1 = std::chrono::steady_clock::now();

    const int64_t max_pos = gen_.config().max_position_embeddings;
    TokenStream stream(tok_);
    std::vector<int32_t> reply;
    std::string stop = fmt::format("length (--max-new-tokens {})", o_.max_new_tokens);
    while (static_cast<int>(reply.size()) < o_.max_new_tokens) {
      const int32_t id = sampler_.sample(decodable(logits.first(sample_vocab_)));
      if (std::find(stops_.begin(), stops_.end(), id) != stops_.end()) {
        stop = fmt::format("end token {}", tok_.token_str(id).value_or("?"));
        break;
      }
      write_out(stream.push(id));
      reply.push_back(id);
      if (static_cast<int>(reply.size()) == o_.max_new_tokens) break;
      if (gen_.length() >= max_pos) {
        stop = fmt::format("length (the model's max_position_embeddings {})", max_pos);
        break;
      }
      logits = gen_.step(id);
      cached_.push_back(id);
    }
    write_out(stream.finish() + "\n");
    // Why it ended, on stderr: an empty reply is an end token at once, not a silent failure.
    std::fprintf(stderr, "stop: %s after %zu new tokens\n", stop.c_str(), reply.size());
    const auto t2 = std::chrono::steady_clock::now();
    KILN_LOG_DEBUG("prompt {} tokens ({} run) in {:.3f}s; {} new tokens in {:.3f}s", prompt.size(),
                   prompt.size() - common, std::chrono::duration<double>(t1 - t0).count(),
                   reply.size(), std::chrono::duration<double>(t2 - t1).count());
    return reply;
  }

 private:
  const GenerateOpts& o_;
  const Tokenizer& tok_;
  Generator gen_;
  Sampler sampler_;
  // `logits` with the gaps' logits at -inf (a copy, only when the tokenizer has gaps).
  std::span<const float> decodable(std::span<const float> logits) {
    if (gaps_.empty()) return logits;
    masked_.assign(logits.begin(), logits.end());
    for (int32_t id : gaps_) masked_[static_cast<size_t>(id)] = -INFINITY;
    return masked_;
  }

  size_t sample_vocab_;
  std::vector<int32_t> gaps_;    // ids below sample_vocab_ the tokenizer has no token for
  std::vector<float> masked_;    // (sample_vocab_) the logits with the gaps masked
  std::vector<int32_t> stops_;   // the ids generation ends at
  std::vector<int32_t> cached_;  // the ids in gen_'s cache
};

std::string read_all_stdin() {
  std::string s(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>{});
  // `echo hi | kiln generate` means the prompt "hi"
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

Tokenizer load_tokenizer(const GenerateOpts& o) {
  if (!o.tokenizer.empty()) return Tokenizer::load(o.tokenizer);
  const fs::path path = fs::path(o.model) / "tokenizer.json";
  if (!fs::exists(path)) {
    fail("{}: no such file; pass --tokenizer PATH (a tokenizer.json or a directory with one)",
         path.string());
  }
  return Tokenizer::load(path);
}

// The template of a chat (chosen as training chooses it; an unknown one is an error naming
// --template), or for a plain prompt the one kiln knows for this model, if any (for its end
// tokens).
const ChatTemplate* generate_template(const GenerateOpts& o) {
  const fs::path tok_dir = o.tokenizer.empty() ? fs::path(o.model) : fs::path(o.tokenizer);
  if (o.chat || !o.chat_template.empty()) {
    return &choose_chat_template(tok_dir, o.chat_template, "--template");
  }
  const ModelChatTemplate own = model_chat_template(tok_dir);
  if (own.known) return &chat_template(*own.known);
  return own.where.empty() ? &chat_template(ChatTemplateId::kQwen25) : nullptr;
}

// The ids generation stops at: the template's end tokens the tokenizer has, and always its end of
// text (<|endoftext|> or <|end_of_text|>).
std::vector<int32_t> stop_ids(const Tokenizer& tok, const ChatTemplate* tmpl) {
  std::vector<std::string_view> names = {"<|endoftext|>", "<|end_of_text|>"};
  if (tmpl) {
    const std::vector<std::string_view> own = tmpl->stop_tokens();
    names.insert(names.end(), own.begin(), own.end());
  }
  std::vector<int32_t> ids;
  for (const std::string_view n : names) {
    const int32_t id = tok.token_id(n);
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

int run_generate(const GenerateOpts& opts) {
  const ModelSource src = open_model_source(opts.model, opts.adapter);
  check_source_base(src, opts.allow_other_base);
  GenerateOpts o = opts;
  o.model = src.dir.string();  // a run or checkpoint: the tokenizer and template it holds
  const AdaptedModel& model = src.model;
  const Tokenizer tok = load_tokenizer(o);
  const ChatTemplate* tmpl = generate_template(o);
  ChatOptions options{.add_generation_prompt = true, .date_string = o.date_string};
  if (!o.enable_thinking.empty()) options.enable_thinking = o.enable_thinking == "true";
  if (tmpl) check_enable_thinking(*tmpl, options.enable_thinking, "--enable-thinking");
  if (!o.date_string.empty() && tmpl->default_date().empty()) {
    fail("--date-string: the {} chat template shows no date", tmpl->name());
  }
  const ParamLayout layout(model.config, model.lora());
  const std::unique_ptr<Backend> backend = make_backend(DeviceRequest::kAuto, ComputeDType::kFp32);
  ParamStore params(layout, *backend, /*with_grads=*/false);
  load_model_source(src, layout, params);
  Session session(o, tok, model, params, *backend, stop_ids(tok, tmpl));

  std::vector<ChatMessage> history;
  if (o.chat && !o.system.empty()) history.push_back({"system", o.system});
  // Tool definitions go into the system prompt; a reply's <tool_call> text stays in the history
  // as its content, which renders exactly as the tool calls it holds.
  std::vector<OrderedJson> tools;
  if (!o.tools_file.empty()) {
    tools = chat_tools_from_json(parse_json_ordered(read_file(o.tools_file), o.tools_file),
                                 o.tools_file);
  }
  // Tokens for one user turn: the whole conversation so far in chat mode, else the raw text.
  const auto prompt_ids = [&](const std::string& text) {
    if (!o.chat) return tok.encode_with_special_tokens(text);
    history.push_back({"user", text});
    // Message contents are plain text: "<|im_end|>" typed by the user cannot end a turn.
    return encode_chat(tok, *tmpl, history, tools, options, /*parse_special_in_content=*/false);
  };
  const auto turn = [&](const std::string& text) {
    const std::vector<int32_t> ids = prompt_ids(text);
    if (ids.empty()) fail("the prompt is empty: nothing to generate from");
    const std::vector<int32_t> reply = session.respond(ids);
    if (o.chat) history.push_back({"assistant", tok.decode(reply)});
  };

  if (!o.interactive) {
    turn(o.has_prompt ? o.prompt : read_all_stdin());
    return 0;
  }
  const bool tty = ::isatty(STDIN_FILENO) != 0;
  std::string line;
  while (true) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    turn(line);
  }
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOpts>();
  CLI::App* sub = app.add_subcommand(
      "generate", "Generate text from a model, streamed as it is produced (KV-cached decoding)");
  add_model_options(sub, o->model, o->adapter, o->allow_other_base);
  sub->add_option("--tokenizer", o->tokenizer,
                  "A tokenizer.json, or a directory with one (default: MODEL/tokenizer.json)");
  sub->add_flag("--chat", o->chat,
                "Render the prompt as a user message with the chat template, and answer as the "
                "assistant");
  auto* prompt = sub->add_option("--prompt", o->prompt,
                                 "The prompt (without it and --interactive, all of stdin is one)");
  sub->add_flag("--interactive", o->interactive,
                "Read prompts from stdin, one per line; with --chat the conversation goes on")
      ->excludes(prompt);
  sub->add_option("--system", o->system,
                  "System prompt for --chat (default: the template's own, if it has one)");
  sub->add_option("--tools", o->tools_file,
                  "With --chat: a JSON file holding a list of tool definitions, rendered as the "
                  "chat template renders them");
  add_chat_template_options(sub, o->chat_template, o->enable_thinking,
                            "With --chat: ", "the model's own, when kiln knows it");
  sub->add_option(
      "--date-string", o->date_string,
      "With --chat: the date of Llama 3's system block, \"Today Date: S\" (default: the "
      "template's, " +
          std::string(chat_template(ChatTemplateId::kLlama3).default_date()) + ")");
  sub->add_option("--max-new-tokens", o->max_new_tokens, "Stop after this many new tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--temperature", o->temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--top-p", o->top_p, "Nucleus sampling: keep the most likely tokens up to P")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  sub->add_option("--seed", o->seed, "Sampling seed (the same seed gives the same text)")
      ->capture_default_str();
  return {sub, [o, prompt] {
            if (!o->system.empty() && !o->chat) fail("--system needs --chat");
            if (!o->tools_file.empty() && !o->chat) fail("--tools needs --chat");
            if (!o->enable_thinking.empty() && !o->chat) fail("--enable-thinking needs --chat");
            if (!o->date_string.empty() && !o->chat) fail("--date-string needs --chat");
            o->has_prompt = prompt->count() > 0;
            return run_generate(*o);
          }};
}

}  // namespace kiln::cli
