// The hub's HTTP API as kiln uses it (the endpoints huggingface_hub's model_info and
// hf_hub_download call):
//   GET {endpoint}/api/models/{ORG/NAME}/revision/{REV}?blobs=true
//       -> {"sha": COMMIT, "siblings": [{"rfilename", "size", "blobId", "lfs": {"sha256",
//       "size"}}]}
//   GET {endpoint}/{ORG/NAME}/resolve/{COMMIT}/{FILE}   (Range: bytes=N- to resume; an LFS file
//       redirects to the file storage)
// and its refusals, told apart by X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound,
// GatedRepo) as huggingface_hub's hf_raise_for_status does, each made one line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/hub/file_hash.h"
#include "kiln/hub/http_client.h"
#include "kiln/hub/hub_settings.h"
#include "kiln/hub/repo_ref.h"

namespace kiln {

struct RepoFile {
  std::string path;  // relative, '/'-separated; checked never to leave the snapshot
  uint64_t size = 0;
  std::string etag;  // the blob's name in the cache: the LFS sha256, else the git blob id
  HashKind hash = HashKind::kGitBlobSha1;  // what etag is a digest of
};

struct RepoRevision {
  std::string commit;           // 40 hex
  std::vector<RepoFile> files;  // in the hub's order
};

// The revision's commit and files; fails in one line on every refusal (see above).
RepoRevision fetch_revision(HttpClient& http, const HubSettings& hub, const RepoRef& ref);

// {endpoint}/{id}/resolve/{commit}/{file}, each path segment escaped.
std::string resolve_url(HttpClient& http, const HubSettings& hub, const std::string& id,
                        const std::string& commit, const std::string& file);

// Throws the one-line error for a refused or failed response to a request about `ref`
// (`what`: the file, or "metadata").
[[noreturn]] void fail_response(const HttpResponse& r, const HubSettings& hub, const RepoRef& ref,
                                const std::string& what);

}  // namespace kiln
