#include "kiln/data/preference_pairs.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
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

const OrderedJson* find_prompt(const OrderedJson& r) {
  for (const char* name : kPromptFields) {
    if (r.contains(name)) return &r.at(name);
  }
  return nullptr;
}

// A text record's prompt (with_implicit_prompt has given one to a record without).
const OrderedJson& prompt_of(const OrderedJson& r) {
  const OrderedJson* p = find_prompt(r);
  KILN_CHECK(p != nullptr, "preference record without a prompt");
  return *p;
}

// TRL's extract_prompt on two texts: the index, in bytes, of the first code point where they
// differ, one back when a space precedes it (the space goes with the completions); where the
// shorter is a prefix of the longer, its last code point's (Python's loop index after a loop
// without a break).
size_t implicit_prompt_end(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  const auto code_point_start = [&](size_t i) {
    while (i > 0 && (static_cast<unsigned char>(a[i]) & 0xC0) == 0x80) --i;
    return i;
  };
  const size_t i = static_cast<size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
      a.begin());
  if (i == n) return n == 0 ? 0 : code_point_start(n - 1);
  const size_t at = code_point_start(i);
  return at > 0 && a[at - 1] == ' ' ? at - 1 : at;
}

// ... and on two message lists: the first message where they differ (or the shorter's last).
size_t implicit_prompt_end(const OrderedJson& a, const OrderedJson& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return i;
  }
  return n == 0 ? 0 : n - 1;
}

// TRL's maybe_extract_prompt: a text record without a prompt, or whose prompt is not of its
// completions' kind (a text prompt beside message lists that hold it too, as in
// ultrafeedback_binarized), takes as its prompt what chosen and rejected both start with, and
// as completions what follows; other records are used as they are (nullopt).
std::optional<OrderedJson> with_implicit_prompt(const OrderedJson& r, const std::string& where) {
  const OrderedJson& chosen = field(r, "chosen", where);
  const OrderedJson& rejected = field(r, "rejected", where);
  const OrderedJson* prompt = find_prompt(r);
  if (prompt != nullptr && prompt->is_array() == chosen.is_array()) return std::nullopt;
  if (chosen.is_array() != rejected.is_array() || !(chosen.is_array() || chosen.is_string()) ||
      !(rejected.is_array() || rejected.is_string())) {
    fail("{}: chosen and rejected must both be texts or both message lists, got {} and {}", where,
         json_preview(chosen), json_preview(rejected));
  }
  OrderedJson out = OrderedJson::object();
  if (chosen.is_string()) {
    const std::string c = chosen.get<std::string>(), rj = rejected.get<std::string>();
    const size_t end = implicit_prompt_end(c, rj);
    out["prompt"] = c.substr(0, end);
    out["chosen"] = c.substr(end);
    out["rejected"] = rj.substr(end);
  } else {
    const size_t end = implicit_prompt_end(chosen, rejected);
    const auto d = static_cast<std::ptrdiff_t>(end);
    out["prompt"] = OrderedJson(chosen.begin(), chosen.begin() + d);
    out["chosen"] = OrderedJson(chosen.begin() + d, chosen.end());
    out["rejected"] = OrderedJson(rejected.begin() + d, rejected.end());
  }
  return out;
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
  const std::vector<ChatMessage> prompt = chat_messages_from_json(prompt_of(r), where + ": prompt");
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
  return {text_ids(e, string_at(prompt_of(r), "prompt", where)),
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
    const std::optional<OrderedJson> implicit = with_implicit_prompt(r, where);
    const OrderedJson& record = implicit ? *implicit : r;
    p = record.at("chosen").is_array() ? conversational(record, e, where)
                                       : standard(record, e, where);
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
