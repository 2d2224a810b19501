// Where a model named on the command line or in a recipe is: the one function every entry point
// calls (model.path, model.adapter, --model, --adapter, init --tokenizer).
//
// The rule: a local path that exists wins; else "ORG/NAME" (or "ORG/NAME@REV", or the revision
// given beside it) is looked up in the Hugging Face cache (hub_settings.h: HF_HUB_CACHE, else
// HF_HOME/hub, else ~/.cache/huggingface/hub), refs/<REV> -> snapshots/<COMMIT>/, read as it is;
// else, when downloading is allowed (a recipe's model.download: true; off by default so a
// typo never starts a multi-GB download), fetched there first; else an error saying all of this.
#pragma once

#include <filesystem>
#include <string>

namespace kiln {

namespace fs = std::filesystem;

struct ModelLocation {
  fs::path dir;          // what to read: the spec itself, or the cached snapshot
  std::string repo_id;   // "ORG/NAME" when it came from the hub's cache, else empty
  std::string revision;  // the revision it resolved (with repo_id)
  bool from_hub() const { return !repo_id.empty(); }
};

struct LocateOptions {
  std::string what = "model";  // the key or flag, named in errors: "model.path", "--model"
  std::string revision;        // beside the spec (model.revision, --revision); "" = main
  bool download = false;       // fetch a repository missing from the cache
};

// A spec that is neither an existing path nor of the ORG/NAME shape is returned as it is, for
// the caller's own "no such file" error.
ModelLocation locate_model(const std::string& spec, const LocateOptions& opt = {});

}  // namespace kiln
