// A model repository on the hub as kiln names it: "ORG/NAME" with an optional "@REVISION" (a
// branch, tag or 40-hex commit). Only model repositories: the cache folder is models--ORG--NAME.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln {

inline constexpr const char* kDefaultRevision = "main";

struct RepoRef {
  std::string id;                           // "Qwen/Qwen3-0.6B"
  std::string revision = kDefaultRevision;  // "main", a tag, or a commit hash
  std::string text() const { return id + "@" + revision; }
};

// ORG/NAME as the hub allows it (huggingface_hub's validate_repo_id, with the namespace
// required): letters, digits, '-', '_', '.'; no "--" or "..", neither part starting or ending
// with '-' or '.', at most 96 characters.
bool is_repo_id(std::string_view s);

// "ORG/NAME" or "ORG/NAME@REV" -> the reference; nullopt when `spec` is not of that shape.
// `revision` (a recipe key or --revision), when not empty, is used where the spec names none;
// naming a different one in both is an error naming `what` (the key or flag).
std::optional<RepoRef> parse_repo_ref(std::string_view spec, std::string_view revision = "",
                                      std::string_view what = "model");

// True for a 40-character lowercase hex string: a commit, which needs no ref to resolve.
bool is_commit_hash(std::string_view s);

// "models--ORG--NAME": the repository's folder in the cache.
std::string repo_folder_name(std::string_view id);

}  // namespace kiln
