// The tokenizer.json loader: checks every field it reads, and names the file and field in each
// error. Hostile input (see fuzz/tokenizer_json_fuzz.cc) must end in kiln::Error, never a crash.
#include "kiln/base/error.h"
#include "kiln/text/byte_level.h"
#include "kiln/text/normalizer.h"
#include "kiln/text/tokenizer_impl.h"
#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

// Token strings may hold newlines and quotes: show them JSON-escaped, and cut long ones, so the
// message stays one readable line.
std::string quote(std::string_view s) {
  std::string q = Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
  if (q.size() > 60) {
    size_t cut = 56;
    while (cut > 0 && (static_cast<uint8_t>(q[cut]) & 0xC0) == 0x80) --cut;
    q = q.substr(0, cut) + "...\"";
  }
  return q;
}

// A name from the file ('WordPiece'), shown between single quotes.
std::string name(std::string_view s) {
  std::string out(1, '\'');
  out.append(printable(s)).push_back('\'');
  return out;
}

class Loader {
 public:
  explicit Loader(const std::string& what) : what_(what) {}

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {}", what_, fmt::format(f, std::forward<Args>(args)...));
  }

  // The member `key` of object `obj` (at `path`), or nullptr when absent or null.
  const Json* find(const Json& obj, const char* key) const {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const Json& need(const Json& obj, const char* key, const std::string& path) const {
    const Json* v = find(obj, key);
    if (!v) error("{} is missing", path);
    return *v;
  }
  const Json& object(const Json& v, const std::string& path) const {
    if (!v.is_object()) error("{} is a JSON {}, expected an object", path, v.type_name());
    return v;
  }
  const Json& array(const Json& v, const std::string& path) const {
    if (!v.is_array()) error("{} is a JSON {}, expected an array", path, v.type_name());
    return v;
  }
  const std::string& string(const Json& v, const std::string& path) const {
    if (!v.is_string()) error("{} is a JSON {}, expected a string", path, v.type_name());
    return v.get_ref<const std::string&>();
  }
  bool boolean(const Json& obj, const char* key, const std::string& path, bool fallback) const {
    const Json* v = find(obj, key);
    if (!v) return fallback;
    if (!v->is_boolean()) error("{} is a JSON {}, expected true or false", path, v->type_name());
    return v->get<bool>();
  }
  // An id: a non-negative integer below max_id (a little past the number of entries, so that a
  // hostile file cannot make the per-id tables huge with one large id).
  int32_t id(const Json& v, const std::string& path) const {
    if (!v.is_number_integer())
      error("{} is a JSON {}, expected an integer id", path, v.type_name());
    const bool negative = !v.is_number_unsigned() && v.get<int64_t>() < 0;
    if (negative || v.get<uint64_t>() > static_cast<uint64_t>(max_id)) {
      error("{} is {}, outside 0..{}", path, v.dump(), max_id);
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }
  std::string type(const Json& obj, const std::string& path) const {
    object(obj, path);
    return string(need(obj, "type", path + ".type"), path + ".type");
  }

  int64_t max_id = 0;

 private:
  const std::string& what_;
};

void load_normalizer(const Loader& L, const Json& root, TokenizerImpl& t) {
  const Json* n = L.find(root, "normalizer");
  if (!n) return;
  const std::string type = L.type(*n, "normalizer");
  if (type == "NFC") {
    t.nfc = true;
  } else if (type == "Sequence") {
    const Json& list =
        L.array(L.need(*n, "normalizers", "normalizer.normalizers"), "normalizer.normalizers");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = fmt::format("normalizer.normalizers[{}]", i);
      const std::string sub = L.type(list[i], path);
      if (sub != "NFC") L.error("{}.type is {}; only NFC is supported", path, name(sub));
      t.nfc = true;
    }
  } else {
    L.error("normalizer.type is {}; only NFC (or none) is supported", name(type));
  }
}

SplitBehavior behavior(const Loader& L, const std::string& s, const std::string& path) {
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  L.error("{} is {}, expected Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous",
          path, name(s));
}

// Returns true when the step was the ByteLevel one (which must come last).
bool load_pre_step(const Loader& L, const Json& step, const std::string& path,
                   const std::string& what, TokenizerImpl& t) {
  const std::string type = L.type(step, path);
  if (type == "Split") {
    const Json& pattern = L.object(L.need(step, "pattern", path + ".pattern"), path + ".pattern");
    const bool regex = pattern.contains("Regex");
    const std::string ppath = path + (regex ? ".pattern.Regex" : ".pattern.String");
    if (!regex && !pattern.contains("String"))
      L.error("{}.pattern has neither Regex nor String", path);
    const std::string& text = L.string(pattern.at(regex ? "Regex" : "String"), ppath);
    const std::string& b =
        L.string(L.need(step, "behavior", path + ".behavior"), path + ".behavior");
    t.pre_tokenizer.add_split(Regex(text, !regex, what + ": " + ppath),
                              behavior(L, b, path + ".behavior"),
                              L.boolean(step, "invert", path + ".invert", false));
    return false;
  }
  if (type == "ByteLevel") {
    if (L.boolean(step, "add_prefix_space", path + ".add_prefix_space", false)) {
      L.error("{}.add_prefix_space is true; not supported", path);
    }
    if (L.boolean(step, "use_regex", path + ".use_regex", true)) {
      t.pre_tokenizer.add_split(Regex(kGpt2Pattern, false, "GPT-2 pattern"),
                                SplitBehavior::kIsolated, false);
    }
    return true;
  }
  L.error("{}.type is {}; only Split and ByteLevel are supported", path, name(type));
}

void load_pre_tokenizer(const Loader& L, const Json& root, const std::string& what,
                        TokenizerImpl& t) {
  const Json& p = L.need(root, "pre_tokenizer", "pre_tokenizer");
  const std::string type = L.type(p, "pre_tokenizer");
  bool byte_level = false;
  if (type == "Sequence") {
    const Json& list = L.array(L.need(p, "pretokenizers", "pre_tokenizer.pretokenizers"),
                               "pre_tokenizer.pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = fmt::format("pre_tokenizer.pretokenizers[{}]", i);
      if (byte_level) L.error("{} comes after the ByteLevel step, which must be last", path);
      byte_level = load_pre_step(L, list[i], path, what, t);
    }
  } else {
    byte_level = load_pre_step(L, p, "pre_tokenizer", what, t);
  }
  if (!byte_level) L.error("pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
}

// TemplateProcessing: the special tokens of its "single" template before and after $A. The
// "pair" template is never used (kiln encodes single texts only) and is not read.
void load_template_processing(const Loader& L, const Json& p, const std::string& path,
                              TokenizerImpl& t) {
  const std::string spath = path + ".single";
  const Json& single = L.array(L.need(p, "single", spath), spath);
  const std::string tpath = path + ".special_tokens";
  const Json& specials = L.object(L.need(p, "special_tokens", tpath), tpath);
  bool sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string ipath = fmt::format("{}[{}]", spath, i);
    const Json& item = L.object(single[i], ipath);
    if (const Json* seq = L.find(item, "Sequence")) {
      const std::string& id =
          L.string(L.need(L.object(*seq, ipath + ".Sequence"), "id", ipath + ".Sequence.id"),
                   ipath + ".Sequence.id");
      if (id != "A") L.error("{}.Sequence.id is {}, expected 'A'", ipath, name(id));
      if (sequence) L.error("{} is a second Sequence", ipath);
      sequence = true;
      continue;
    }
    const Json* special = L.find(item, "SpecialToken");
    if (!special) L.error("{} is neither a SpecialToken nor a Sequence", ipath);
    const std::string& key = L.string(
        L.need(L.object(*special, ipath + ".SpecialToken"), "id", ipath + ".SpecialToken.id"),
        ipath + ".SpecialToken.id");
    const auto entry = specials.find(key);
    if (entry == specials.end()) L.error("{}: {} is not in {}", ipath, quote(key), tpath);
    const std::string epath = fmt::format("{}[{}]", tpath, quote(key));
    const std::string idspath = epath + ".ids";
    const Json& ids = L.array(L.need(L.object(*entry, epath), "ids", idspath), idspath);
    for (size_t k = 0; k < ids.size(); ++k) {
      const std::string kpath = fmt::format("{}[{}]", idspath, k);
      const int32_t id = L.id(ids[k], kpath);
      if (static_cast<size_t>(id) >= t.flags.size() || !(t.flags[id] & TokenizerImpl::kPresent)) {
        L.error("{} is {}, which is not in the vocabulary", kpath, id);
      }
      (sequence ? t.suffix : t.prefix).push_back(id);
    }
  }
  if (!sequence) L.error("{} has no Sequence 'A'", spath);
}

// The post-processor: none, ByteLevel (it moves offsets only, never ids), TemplateProcessing, or
// a Sequence of those (Llama 3: ByteLevel then TemplateProcessing).
void load_post_processor(const Loader& L, const Json& root, TokenizerImpl& t) {
  const Json* p = L.find(root, "post_processor");
  if (!p) return;
  bool templated = false;
  const auto step = [&](const Json& s, const std::string& path) {
    const std::string type = L.type(s, path);
    if (type == "ByteLevel") return;
    if (type != "TemplateProcessing") {
      L.error("{}.type is {}; only ByteLevel and TemplateProcessing are supported", path,
              name(type));
    }
    if (templated) L.error("{} is a second TemplateProcessing", path);
    templated = true;
    load_template_processing(L, s, path, t);
  };
  if (L.type(*p, "post_processor") != "Sequence") {
    step(*p, "post_processor");
    return;
  }
  const std::string lpath = "post_processor.processors";
  const Json& list = L.array(L.need(*p, "processors", lpath), lpath);
  for (size_t i = 0; i < list.size(); ++i) step(list[i], fmt::format("{}[{}]", lpath, i));
}

void check_model_options(const Loader& L, const Json& model) {
  if (L.boolean(model, "byte_fallback", "model.byte_fallback", false)) {
    L.error("model.byte_fallback is true; not supported");
  }
  if (const Json* d = L.find(model, "dropout")) {
    if (!d->is_number() || d->get<double>() != 0.0) {
      L.error("model.dropout is {}; only null or 0 is supported", d->dump());
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::string path = std::string("model.") + key;
    if (const Json* v = L.find(model, key); v && !L.string(*v, path).empty()) {
      L.error("{} is {}; only empty is supported", path, quote(v->get<std::string>()));
    }
  }
}

// The merges in rank order, as ids, from either serialisation.
std::vector<Merge> load_merges(const Loader& L, const Json& model, const TokenMap& vocab) {
  const Json& list = L.array(L.need(model, "merges", "model.merges"), "model.merges");
  std::vector<Merge> merges;
  merges.reserve(list.size());
  auto lookup = [&](const std::string& s, const std::string& path) {
    const auto it = vocab.find(s);
    if (it == vocab.end()) L.error("{}: token {} is not in model.vocab", path, quote(s));
    return it->second;
  };
  std::string a, b;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = fmt::format("model.merges[{}]", i);
    const Json& m = list[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        L.error("{} is {}, expected two tokens separated by one space", path, quote(s));
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      L.error("{} is {}, expected \"a b\" or [\"a\", \"b\"]", path, quote(m.dump()));
    }
    const int32_t left = lookup(a, path), right = lookup(b, path);
    const auto it = vocab.find(a + b);
    if (it == vocab.end()) {
      L.error("{}: the merged token {} is not in model.vocab", path, quote(a + b));
    }
    merges.push_back({left, right, it->second});
  }
  return merges;
}

void set_id(TokenizerImpl& t, int32_t id, std::string spelling, uint8_t flags) {
  if (static_cast<size_t>(id) >= t.flags.size()) {
    t.flags.resize(id + 1, 0);
    t.spelling.resize(id + 1);
  }
  t.flags[id] = flags;
  t.spelling[id] = std::move(spelling);
}

}  // namespace

std::shared_ptr<const TokenizerImpl> build_tokenizer(const Json& root, const std::string& what) {
  Loader L(what);
  L.object(root, "the top level");
  auto t = std::make_shared<TokenizerImpl>();
  t->source = what;

  // The model: vocabulary and merges.
  const Json& model = L.need(root, "model", "model");
  if (const std::string type = L.type(model, "model"); type != "BPE") {
    L.error("model.type is {}, expected 'BPE'", name(type));
  }
  check_model_options(L, model);
  const Json& vocab = L.object(L.need(model, "vocab", "model.vocab"), "model.vocab");
  if (vocab.empty()) L.error("model.vocab is empty");
  const Json* added = L.find(root, "added_tokens");
  if (added) L.array(*added, "added_tokens");
  // Llama 3 numbers its added tokens from 128000; a small test vocabulary keeps that layout.
  L.max_id = static_cast<int64_t>(vocab.size() + (added ? added->size() : 0)) + (1 << 18);
  t->model_ids.reserve(vocab.size());
  for (const auto& [token, value] : vocab.items()) {
    const int32_t id = L.id(value, "model.vocab[" + quote(token) + "]");
    if (static_cast<size_t>(id) < t->flags.size() && t->flags[id]) {
      L.error("model.vocab: id {} is given to both {} and {}", id, quote(t->spelling[id]),
              quote(token));
    }
    set_id(*t, id, token, TokenizerImpl::kPresent);
    t->model_ids.emplace(token, id);
  }
  const std::vector<Merge> merges = load_merges(L, model, t->model_ids);

  int32_t unk_id = -1;
  if (const Json* unk = L.find(model, "unk_token")) {
    const std::string& s = L.string(*unk, "model.unk_token");
    const auto it = t->model_ids.find(s);
    if (it == t->model_ids.end()) L.error("model.unk_token {} is not in model.vocab", quote(s));
    unk_id = it->second;
  }
  std::array<int32_t, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, byte_to_code_point(static_cast<uint8_t>(b)));
    const auto it = t->model_ids.find(s);
    byte_ids[b] = it == t->model_ids.end() ? -1 : it->second;
  }
  std::unordered_map<std::string, int32_t> whole_words;
  if (L.boolean(model, "ignore_merges", "model.ignore_merges", false)) {
    std::string raw;
    for (const auto& [token, id] : t->model_ids) {
      if (decode_byte_level(token, raw)) whole_words.emplace(raw, id);
    }
  }
  t->bpe = std::make_unique<Bpe>(byte_ids, merges, unk_id,
                                 L.boolean(model, "fuse_unk", "model.fuse_unk", false),
                                 std::move(whole_words));

  // Added tokens.
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  load_normalizer(L, root, *t);
  if (added) {
    for (size_t i = 0; i < added->size(); ++i) {
      const std::string path = fmt::format("added_tokens[{}]", i);
      const Json& a = L.object((*added)[i], path);
      AddedToken tok;
      tok.id = L.id(L.need(a, "id", path + ".id"), path + ".id");
      tok.content = L.string(L.need(a, "content", path + ".content"), path + ".content");
      if (tok.content.empty()) L.error("{}.content is empty", path);
      tok.special = L.boolean(a, "special", path + ".special", false);
      tok.lstrip = L.boolean(a, "lstrip", path + ".lstrip", false);
      tok.rstrip = L.boolean(a, "rstrip", path + ".rstrip", false);
      tok.single_word = L.boolean(a, "single_word", path + ".single_word", false);
      tok.normalized = L.boolean(a, "normalized", path + ".normalized", true);
      if (t->added_ids.contains(tok.content)) {
        L.error("{}: {} is added twice", path, quote(tok.content));
      }
      t->added_ids.emplace(tok.content, tok.id);
      const uint8_t flags = TokenizerImpl::kPresent | TokenizerImpl::kAdded |
                            (tok.special ? TokenizerImpl::kSpecial : 0);
      set_id(*t, tok.id, tok.content, flags);
      if (tok.normalized) {
        normalized_patterns.push_back(t->nfc ? nfc(tok.content) : tok.content);
        normalized.push_back(std::move(tok));
      } else {
        raw_patterns.push_back(tok.content);
        raw.push_back(std::move(tok));
      }
    }
  }

  t->raw_added = AddedMatcher(std::move(raw), std::move(raw_patterns));
  t->normalized_added = AddedMatcher(std::move(normalized), std::move(normalized_patterns));
  load_pre_tokenizer(L, root, what, *t);
  load_post_processor(L, root, *t);

  const Json& decoder = L.need(root, "decoder", "decoder");
  if (const std::string type = L.type(decoder, "decoder"); type != "ByteLevel") {
    L.error("decoder.type is {}, expected 'ByteLevel'", name(type));
  }

  // Decoded bytes per id: a model token's byte-level spelling read back as bytes (its UTF-8
  // as it stands when it is not in the alphabet, as Hugging Face's decoder does); an added
  // token's content as it is.
  t->bytes_at.assign(t->flags.size() + 1, 0);
  std::string raw_bytes;
  for (size_t id = 0; id < t->flags.size(); ++id) {
    t->bytes_at[id] = static_cast<uint32_t>(t->bytes.size());
    const std::string& s = t->spelling[id];
    if (!(t->flags[id] & TokenizerImpl::kAdded) && decode_byte_level(s, raw_bytes)) {
      t->bytes += raw_bytes;
    } else {
      t->bytes += s;
    }
  }
  t->bytes_at.back() = static_cast<uint32_t>(t->bytes.size());
  return t;
}

}  // namespace kiln::text
