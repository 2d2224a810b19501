#include "kiln/text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "kiln/base/error.h"

namespace kiln::text {
namespace {

// Bounds the work of one match so that a pathological pattern from a hostile tokenizer.json
// fails with an error instead of running for hours. Qwen2's pattern needs a few dozen steps.
constexpr uint32_t kMatchLimit = 10'000'000;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  bool jit = false;
  ~Impl() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern, bool literal, const std::string& what)
    : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2 refuses UCP alongside LITERAL (it has no classes to apply to).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &err, &offset, nullptr);
  if (!impl_->code) fail("{}: bad regex at offset {}: {}", what, offset, pcre2_message(err));
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
  impl_->context = pcre2_match_context_create(nullptr);
  if (!impl_->context) fail("{}: out of memory compiling regex", what);
  pcre2_set_match_limit(impl_->context, kMatchLimit);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const {
  // Match data is per call: the compiled pattern is shared read-only between threads.
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (!md) fail("out of memory matching regex");
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start <= subject.size()) {
    // The subject was validated once by the caller; checking it again on every call from a
    // moving start offset would make the whole split quadratic.
    const int rc =
        impl_->jit ? pcre2_jit_match(impl_->code, s, subject.size(), start, 0, md, impl_->context)
                   : pcre2_match(impl_->code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, md,
                                 impl_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("regex match failed: {}", pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {
      // An empty match (or \K trickery ending before it started): step over one character.
      size_t next = std::max(b, start) + 1;
      while (next < subject.size() && (static_cast<uint8_t>(subject[next]) & 0xC0) == 0x80) {
        ++next;
      }
      start = next;
    }
  }
  pcre2_match_data_free(md);
}

}  // namespace kiln::text
