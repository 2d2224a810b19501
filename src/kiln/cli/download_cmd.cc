// kiln download ORG/NAME[@REV] [--revision R] [--include P ...] [--exclude P ...]: fetches a model
// repository into the Hugging Face cache, laid out as huggingface_hub lays it out, and prints the
// snapshot folder (docs/hub.md). Every command then takes ORG/NAME where it takes a model.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/cli/commands.h"
#include "kiln/hub/download_progress.h"
#include "kiln/hub/hub_download.h"
#include "kiln/hub/hub_settings.h"
#include "kiln/hub/repo_ref.h"

namespace kiln::cli {

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) {
    if (!out.empty()) out += ' ';
    out += s;
  }
  return out;
}

}  // namespace

Command add_download(CLI::App& app) {
  struct Opts {
    std::string repo, revision;
    std::vector<std::string> include, exclude;
    int parallel = DownloadOptions{}.parallel;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub =
      app.add_subcommand("download", "Download a model from the Hugging Face hub into its cache");
  sub->add_option("repo", o->repo, "ORG/NAME, or ORG/NAME@REVISION")->required();
  sub->add_option("--revision", o->revision, "Branch, tag or commit (default: main)");
  sub->add_option("--include", o->include, "Only files matching these patterns (fnmatch)");
  sub->add_option("--exclude", o->exclude, "No file matching these patterns (fnmatch)");
  sub->add_option("--parallel", o->parallel, "Files downloaded at once")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sub->footer("From HF_ENDPOINT (default " + std::string(kDefaultHubEndpoint) +
              ") into HF_HUB_CACHE (else HF_HOME/hub, else ~/.cache/huggingface/hub), with "
              "HF_TOKEN or the token `hf auth login` wrote for gated models. Without --include "
              "and --exclude, files kiln never reads are skipped: " +
              joined(default_download_excludes()) + ". HF_HUB_OFFLINE=1: the cache only.");
  return {sub, [o] {
            const std::optional<RepoRef> ref = parse_repo_ref(o->repo, o->revision, "download");
            if (!ref) fail("download: '{}' is not a repository id ORG/NAME[@REVISION]", o->repo);
            const HubSettings hub = hub_settings_from_env();
            DownloadOptions opt;
            opt.include = o->include;
            opt.exclude = o->exclude;
            opt.parallel = o->parallel;
            const auto progress = make_download_progress(stdout);
            const DownloadResult r = download_repo(hub, *ref, opt, *progress);
            std::printf("%s@%s: %zu files downloaded (%s), %zu already in the cache\n%s\n",
                        ref->id.c_str(), r.commit.c_str(), r.fetched, human_bytes(r.bytes).c_str(),
                        r.cached, r.snapshot.c_str());
            return 0;
          }};
}

}  // namespace kiln::cli
