#include "kiln/text/tokenizer.h"

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/text/normalizer.h"
#include "kiln/text/tokenizer_impl.h"
#include "kiln/text/utf8.h"

namespace kiln {
namespace text {

void TokenizerImpl::encode(std::string_view text, bool parse_special,
                           std::vector<int32_t>& out) const {
  std::vector<AddedMatch> matches;
  raw_added.find(text, parse_special, matches);
  size_t at = 0;
  for (const AddedMatch& m : matches) {
    if (m.begin > at) encode_normalized(text.substr(at, m.begin - at), parse_special, out);
    out.push_back(m.id);
    at = m.end;
  }
  if (at < text.size()) encode_normalized(text.substr(at), parse_special, out);
}

void TokenizerImpl::encode_normalized(std::string_view text, bool parse_special,
                                      std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc) {
    append_nfc(text, normalized);
    text = normalized;
  }
  if (normalized_added.empty()) {
    encode_pieces(text, out);
    return;
  }
  std::vector<AddedMatch> matches;
  normalized_added.find(text, parse_special, matches);
  size_t at = 0;
  for (const AddedMatch& m : matches) {
    if (m.begin > at) encode_pieces(text.substr(at, m.begin - at), out);
    out.push_back(m.id);
    at = m.end;
  }
  if (at < text.size()) encode_pieces(text.substr(at), out);
}

void TokenizerImpl::encode_pieces(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Span> pieces;
  pre_tokenizer.split(text, pieces);
  for (const auto& [b, e] : pieces) bpe->encode(text.substr(b, e - b), out);
}

}  // namespace text

Tokenizer Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? path / "tokenizer.json" : path;
  if (!fs::exists(file, ec)) {
    if (file != path) fail("{}: no tokenizer.json in this directory", path.string());
    fail("{}: no such file", path.string());
  }
  return from_json_text(read_file(file), file.string());
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, const std::string& what) {
  const Json root = parse_json(json_text, what);
  try {
    return Tokenizer(text::build_tokenizer(root, what));
  } catch (const Json::exception& e) {
    // The loader checks types before reading; this is a backstop naming the file all the same.
    fail("{}: {}", what, e.what());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  encode(text, out, parse_special);
  return out;
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out, bool parse_special) const {
  if (const size_t bad = text::find_invalid_utf8(text); bad != std::string_view::npos) {
    fail("text is not valid UTF-8 (byte {} of {})", bad, text.size());
  }
  // About 4 bytes a token on prose. Only for an empty vector: reserving a little more on each
  // call that appends would defeat the vector's geometric growth.
  if (out.empty()) out.reserve(text.size() / 3);
  impl_->encode(text, parse_special, out);
}

std::vector<int32_t> Tokenizer::encode_with_special_tokens(std::string_view text,
                                                           bool parse_special) const {
  std::vector<int32_t> out(impl_->prefix);
  encode(text, out, parse_special);
  out.insert(out.end(), impl_->suffix.begin(), impl_->suffix.end());
  return out;
}

std::span<const int32_t> Tokenizer::special_prefix() const { return impl_->prefix; }
std::span<const int32_t> Tokenizer::special_suffix() const { return impl_->suffix; }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const text::TokenizerImpl& t = *impl_;
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= t.flags.size() ||
        !(t.flags[id] & text::TokenizerImpl::kPresent)) {
      fail("decode: id {} is not in the vocabulary of {} (size {})", id, t.source, t.flags.size());
    }
    if (skip_special && (t.flags[id] & text::TokenizerImpl::kSpecial)) continue;
    bytes.append(t.bytes, t.bytes_at[id], t.bytes_at[id + 1] - t.bytes_at[id]);
  }
  return text::to_valid_utf8(bytes);
}

int32_t Tokenizer::token_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) {
    return it->second;
  }
  if (const auto it = impl_->model_ids.find(token); it != impl_->model_ids.end()) {
    return it->second;
  }
  return -1;
}

std::optional<std::string> Tokenizer::token_str(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->flags.size() ||
      !(impl_->flags[id] & text::TokenizerImpl::kPresent)) {
    return std::nullopt;
  }
  return impl_->spelling[id];
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->flags.size()); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->flags.size() &&
         (impl_->flags[id] & text::TokenizerImpl::kSpecial);
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->flags.size() &&
         (impl_->flags[id] & text::TokenizerImpl::kAdded);
}

const std::string& Tokenizer::source() const { return impl_->source; }

}  // namespace kiln
