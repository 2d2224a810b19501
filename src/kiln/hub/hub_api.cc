#include "kiln/hub/hub_api.h"

#include <sstream>

#include "kiln/base/error.h"
#include "kiln/base/json.h"

namespace kiln {

namespace {

// A repository path kept inside the snapshot: relative, no "." or ".." parts, no empty parts
// (huggingface_hub#4540: a tree entry that escapes the cache).
bool safe_relative_path(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.find('\\') != std::string::npos ||
      p.find('\0') != std::string::npos) {
    return false;
  }
  std::stringstream ss(p);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return p.back() != '/';
}

std::string path_url(HttpClient& http, const std::string& path) {
  std::string out, part;
  std::stringstream ss(path);
  while (std::getline(ss, part, '/')) {
    if (!out.empty()) out += '/';
    out += http.escape(part);
  }
  return out;
}

RepoFile file_of(const Json& s, const std::string& where) {
  RepoFile f;
  if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) {
    fail("{}: a sibling without an rfilename", where);
  }
  f.path = s["rfilename"].get<std::string>();
  if (!safe_relative_path(f.path))
    fail("{}: refusing file path '{}' (not inside the repository)", where, f.path);
  const Json* lfs = s.contains("lfs") && s["lfs"].is_object() ? &s["lfs"] : nullptr;
  if (lfs && lfs->contains("sha256")) {
    f.etag = (*lfs)["sha256"].get<std::string>();
    f.size = (*lfs).value("size", s.value("size", uint64_t{0}));
    f.hash = HashKind::kSha256;
  } else if (s.contains("blobId") && s["blobId"].is_string()) {
    f.etag = s["blobId"].get<std::string>();
    f.size = s.value("size", uint64_t{0});
    f.hash = HashKind::kGitBlobSha1;
  } else {
    fail("{}: {} has neither lfs.sha256 nor blobId (asked with blobs=true)", where, f.path);
  }
  for (char c : f.etag) {
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      fail("{}: {}: bad digest '{}'", where, f.path, f.etag);
  }
  return f;
}

}  // namespace

std::string resolve_url(HttpClient& http, const HubSettings& hub, const std::string& id,
                        const std::string& commit, const std::string& file) {
  return hub.endpoint + "/" + id + "/resolve/" + http.escape(commit) + "/" + path_url(http, file);
}

void fail_response(const HttpResponse& r, const HubSettings& hub, const RepoRef& ref,
                   const std::string& what) {
  if (!r.error.empty()) {
    fail("{}: {} from {}: {} (HF_HUB_OFFLINE=1 uses the cache only)", ref.id, what, hub.endpoint,
         r.error);
  }
  const std::string code = r.header("x-error-code");
  if (code == "GatedRepo" || ((r.status == 401 || r.status == 403) && code.empty())) {
    fail(
        "{} is gated: the hub refused {} ({}){}; accept its terms on its page, then set HF_TOKEN "
        "or run `hf auth login`",
        ref.id, what, r.status, hub.token.empty() ? " without a token" : " with this token");
  }
  if (code == "RepoNotFound") {
    fail("{}: no such model repository on {}{}", ref.id, hub.endpoint,
         hub.token.empty() ? " (a private one needs HF_TOKEN)" : "");
  }
  if (code == "RevisionNotFound") {
    fail("{}: no revision '{}' on {}", ref.id, ref.revision, hub.endpoint);
  }
  if (code == "EntryNotFound") fail("{}: no file {} at revision '{}'", ref.id, what, ref.revision);
  std::string message = r.header("x-error-message");
  if (message.empty()) message = r.body.substr(0, 200);
  for (char& c : message) c = c == '\n' || c == '\r' ? ' ' : c;
  fail("{}: {} from {}: HTTP {}{}{}", ref.id, what, hub.endpoint, r.status,
       message.empty() ? "" : ": ", message);
}

RepoRevision fetch_revision(HttpClient& http, const HubSettings& hub, const RepoRef& ref) {
  const std::string url = hub.endpoint + "/api/models/" + ref.id + "/revision/" +
                          http.escape(ref.revision) + "?blobs=true";
  const HttpResponse r = http.get(url);
  if (!r.ok()) fail_response(r, hub, ref, "metadata");
  const std::string where = ref.id + " metadata (" + url + ")";
  const Json j = parse_json(r.body, where);
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string() ||
      !is_commit_hash(j["sha"].get<std::string>())) {
    fail("{}: no commit 'sha' in the answer", where);
  }
  RepoRevision rev{j["sha"].get<std::string>(), {}};
  if (j.contains("siblings") && j["siblings"].is_array()) {
    for (const Json& s : j["siblings"]) rev.files.push_back(file_of(s, where));
  }
  return rev;
}

}  // namespace kiln
