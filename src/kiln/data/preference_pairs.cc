#include "kiln/data/preference_pairs.h"

#include <algorithm>
#include <array>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/data/formats.h"
#include "kiln/text/chat_messages.h"
#include "kiln/text/tokenizer_config.h"

namespace kiln {

namespace {

// A pair's three parts as token ids.
struct PairParts {
  std::vector<int32_t> prompt, chosen, rejected;
};

// The pre-tokenized forms' field names: TRL's older, then its current.
constexpr std::array<std::array<const char*, 3>, 2> kIdFields = {{
    {"prompt_input_ids", "chosen_input_ids", "rejected_input_ids"},
    {"prompt_ids", "chosen_ids", "rejected_ids"},
}};
// The names other tools give the prompt.
constexpr std::array<const char*, 3> kPromptFields = {"prompt", "question", "instruction"};

const OrderedJson& field(const OrderedJson& r, const char* key, const std::string& where) {
  const auto it = r.find(key);
  if (it == r.end()) fail("{}: missing field '{}'", where, key);
  return *it;
}

std::optional<PairParts> pretokenized(const OrderedJson& r, const PairEncoding& e,
                                      const std::string& where) {
  for (const auto& names : kIdFields) {
    if (!r.contains(names[1]) && !r.contains(names[2])) continue;
    for (const char* name : names) field(r, name, where);  // each one present
    PairParts p;
    p.prompt = read_token_ids(r, names[0], e.vocab_size, false, where);
    p.chosen = read_token_ids(r, names[1], e.vocab_size, false, where);
    p.rejected = read_token_ids(r, names[2], e.vocab_size, false, where);
    return p;
  }
  return std::nullopt;
}

const OrderedJson& prompt_of(const OrderedJson& r, const std::string& where) {
  for (const char* name : kPromptFields) {
    if (r.contains(name)) return r.at(name);
  }
  fail("{}: missing field 'prompt' (or question, instruction)", where);
}

std::vector<int32_t> text_ids(const PairEncoding& e, const std::string& text) {
  std::vector<int32_t> ids;
  e.tokenizer->encode(text, ids, /*parse_special=*/true);
  return ids;
}

// The conversation `prompt` + `completion` rendered without a generation prompt.
std::string rendered_with(const PairEncoding& e, const std::vector<ChatMessage>& prompt,
                          const OrderedJson& completion, const std::string& what) {
  std::vector<ChatMessage> all = prompt;
  for (ChatMessage& m : chat_messages_from_json(completion, what)) all.push_back(std::move(m));
  ChatOptions o = e.chat_options;
  o.add_generation_prompt = false;
  return render_chat(*e.chat, all, {}, o);
}

// TRL's maybe_apply_chat_template: the prompt rendered with its generation prompt, cut to the
// longest prefix it shares with prompt + chosen rendered; each completion what its rendering
// adds past that.
PairParts conversational(const OrderedJson& r, const PairEncoding& e, const std::string& where) {
  KILN_CHECK(e.chat != nullptr, "preference data: no chat template");
  const std::vector<ChatMessage> prompt =
      chat_messages_from_json(prompt_of(r, where), where + ": prompt");
  ChatOptions o = e.chat_options;
  o.add_generation_prompt = true;
  std::string prompt_text = render_chat(*e.chat, prompt, {}, o);
  const std::string chosen =
      rendered_with(e, prompt, field(r, "chosen", where), where + ": chosen");
  const std::string rejected =
      rendered_with(e, prompt, field(r, "rejected", where), where + ": rejected");
  prompt_text.resize(static_cast<size_t>(
      std::mismatch(prompt_text.begin(), prompt_text.end(), chosen.begin(), chosen.end()).first -
      prompt_text.begin()));
  const auto past_prompt = [&](const std::string& s) {
    return s.compare(0, prompt_text.size(), prompt_text) == 0 ? s.substr(prompt_text.size()) : s;
  };
  return {text_ids(e, prompt_text), text_ids(e, past_prompt(chosen)),
          text_ids(e, past_prompt(rejected))};
}

std::string string_at(const OrderedJson& v, const char* name, const std::string& where) {
  if (!v.is_string()) fail("{}: {}: expected a string, got {}", where, name, json_preview(v));
  return v.get<std::string>();
}

PairParts standard(const OrderedJson& r, const PairEncoding& e, const std::string& where) {
  return {text_ids(e, string_at(prompt_of(r, where), "prompt", where)),
          text_ids(e, string_at(field(r, "chosen", where), "chosen", where)),
          text_ids(e, string_at(field(r, "rejected", where), "rejected", where))};
}

// One sequence: prompt (no label) + completion (labels), its first token never labelled.
void append_sequence(Example& ex, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& completion) {
  const size_t first = ex.input_ids.size();
  ex.input_ids.insert(ex.input_ids.end(), prompt.begin(), prompt.end());
  ex.labels.insert(ex.labels.end(), prompt.size(), kIgnoreIndex);
  ex.input_ids.insert(ex.input_ids.end(), completion.begin(), completion.end());
  ex.labels.insert(ex.labels.end(), completion.begin(), completion.end());
  if (ex.labels.size() > first) ex.labels[first] = kIgnoreIndex;
}

// Where the rejected sequence starts in a pair's labels: the second run of unlabelled positions.
size_t rejected_start(std::span<const int32_t> labels) {
  size_t i = 0;
  while (i < labels.size() && labels[i] == kIgnoreIndex) ++i;  // the chosen prompt
  while (i < labels.size() && labels[i] != kIgnoreIndex) ++i;  // the chosen completion
  return i;
}

// A sequence (prompt + completion, `prompt` tokens of prompt) fitted to seq_len: the prompt's
// first tokens go first, then the completion's last.
void fit_sequence(std::vector<int32_t>& ids, std::vector<int32_t>& labels, size_t prompt,
                  size_t seq_len) {
  if (ids.size() <= seq_len) return;
  const size_t cut = std::min(prompt, ids.size() - seq_len);
  ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut));
  labels.erase(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(cut));
  ids.resize(std::min(ids.size(), seq_len));
  labels.resize(ids.size());
  labels[0] = kIgnoreIndex;
}

size_t prompt_length(std::span<const int32_t> labels) {
  size_t i = 0;
  while (i < labels.size() && labels[i] == kIgnoreIndex) ++i;
  return i;
}

}  // namespace

Example encode_preference_pair(const OrderedJson& r, const PairEncoding& e,
                               const std::string& where) {
  if (!r.is_object()) fail("{}: expected a JSON object, got {}", where, json_preview(r));
  std::optional<PairParts> p = pretokenized(r, e, where);
  if (!p) {
    if (e.tokenizer == nullptr) {
      fail(
          "{}: prompt, chosen and rejected as text need a tokenizer (data.tokenizer, or a "
          "tokenizer.json in model.path); pre-tokenized pairs give prompt_input_ids, "
          "chosen_input_ids and rejected_input_ids",
          where);
    }
    const OrderedJson& chosen = field(r, "chosen", where);
    field(r, "rejected", where);
    p = chosen.is_array() ? conversational(r, e, where) : standard(r, e, where);
    p->chosen.push_back(e.completion_end);
    p->rejected.push_back(e.completion_end);
  }
  for (const std::vector<int32_t>* ids : {&p->prompt, &p->chosen, &p->rejected}) {
    for (const int32_t id : *ids) {
      if (id >= e.vocab_size) {
        fail("{}: token id {} is out of range for vocab_size {}", where, id, e.vocab_size);
      }
    }
  }
  Example ex;
  append_sequence(ex, p->prompt, p->chosen);
  append_sequence(ex, p->prompt, p->rejected);
  return ex;
}

std::pair<ExampleView, ExampleView> pair_sequences(ExampleView pair) {
  const size_t r = rejected_start(pair.labels);
  return {{pair.input_ids.first(r), pair.labels.first(r)},
          {pair.input_ids.subspan(r), pair.labels.subspan(r)}};
}

PairFit fit_pair(Example& pair, int seq_len, Overlong overlong) {
  const auto [c, r] = pair_sequences(pair.view());
  const auto labelled = [](ExampleView s) {
    return std::any_of(s.labels.begin(), s.labels.end(),
                       [](int32_t l) { return l != kIgnoreIndex; });
  };
  if (!labelled(c) || !labelled(r)) return PairFit::kEmpty;
  if (std::equal(c.input_ids.begin(), c.input_ids.end(), r.input_ids.begin(), r.input_ids.end()) &&
      std::equal(c.labels.begin(), c.labels.end(), r.labels.begin(), r.labels.end())) {
    return PairFit::kIdentical;
  }
  const auto T = static_cast<size_t>(seq_len);
  if (c.size() <= T && r.size() <= T) return PairFit::kKept;
  if (overlong == Overlong::kDrop) return PairFit::kDropped;
  std::vector<int32_t> ci(c.input_ids.begin(), c.input_ids.end()),
      cl(c.labels.begin(), c.labels.end());
  std::vector<int32_t> ri(r.input_ids.begin(), r.input_ids.end()),
      rl(r.labels.begin(), r.labels.end());
  fit_sequence(ci, cl, prompt_length(c.labels), T);
  fit_sequence(ri, rl, prompt_length(r.labels), T);
  pair.input_ids = ci;
  pair.labels = cl;
  pair.input_ids.insert(pair.input_ids.end(), ri.begin(), ri.end());
  pair.labels.insert(pair.labels.end(), rl.begin(), rl.end());
  return PairFit::kTruncated;
}

int32_t completion_end_token(const Tokenizer& tokenizer, const std::string& tokenizer_json) {
  const Json cfg = tokenizer_config_beside(tokenizer_json);
  if (const auto eos = configured_token(cfg, "eos_token")) {
    if (const int32_t id = tokenizer.token_id(*eos); id >= 0) return id;
  }
  return end_of_text_token(tokenizer);
}

}  // namespace kiln
