#include "kiln/hub/repo_ref.h"

#include <cctype>

#include "kiln/base/error.h"

namespace kiln {

namespace {

bool name_part_ok(std::string_view p) {
  if (p.empty() || p.front() == '-' || p.front() == '.' || p.back() == '-' || p.back() == '.') {
    return false;
  }
  for (char c : p) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

// A revision as it may appear in a URL path segment (escaped there) and as a file under refs/:
// no "..", no leading '/', no whitespace or control characters.
bool revision_ok(std::string_view r) {
  if (r.empty() || r.front() == '/' || r.back() == '/' || r.find("..") != std::string_view::npos) {
    return false;
  }
  for (char c : r) {
    if (std::iscntrl(static_cast<unsigned char>(c)) ||
        std::isspace(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool is_repo_id(std::string_view s) {
  const size_t slash = s.find('/');
  if (s.size() > 96 || slash == std::string_view::npos) return false;
  if (s.find("--") != std::string_view::npos || s.find("..") != std::string_view::npos) {
    return false;
  }
  return name_part_ok(s.substr(0, slash)) && name_part_ok(s.substr(slash + 1));
}

std::optional<RepoRef> parse_repo_ref(std::string_view spec, std::string_view revision,
                                      std::string_view what) {
  const size_t at = spec.find('@');
  const std::string_view id = spec.substr(0, at);
  if (!is_repo_id(id)) return std::nullopt;
  RepoRef ref{std::string(id)};
  if (at != std::string_view::npos) {
    const std::string_view rev = spec.substr(at + 1);
    if (!revision_ok(rev)) fail("{}: '{}': not a revision after '@'", what, spec);
    if (!revision.empty() && revision != rev) {
      fail("{}: '{}' names revision '{}' and the revision given beside it is '{}'", what, spec, rev,
           revision);
    }
    ref.revision = rev;
  } else if (!revision.empty()) {
    if (!revision_ok(revision)) fail("{}: '{}': not a revision", what, revision);
    ref.revision = revision;
  }
  return ref;
}

bool is_commit_hash(std::string_view s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

std::string repo_folder_name(std::string_view id) {
  std::string out = "models--";
  for (char c : id) {
    if (c == '/') {
      out += "--";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace kiln
