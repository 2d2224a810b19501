#include "kiln/train/checkpoint_manifest.h"

#include <fmt/format.h>

#include "kiln/base/error.h"

namespace kiln {

namespace {

void check_version(const fs::path& dir, const Json& m) {
  const int version = m.value("format_version", 0);
  if (version != kCheckpointFormatVersion) {
    fail("{}/manifest.json: unsupported checkpoint format version {} (this kiln reads version {})",
         dir.string(), version, kCheckpointFormatVersion);
  }
}

void check_units_listed(const fs::path& dir, const Json& m) {
  const auto& units = m.at("units");
  if (!units.is_array()) {
    fail("{}/manifest.json: units is {}, expected a list of units", dir.string(), units.dump());
  }
  for (const auto& u : units) u.at("numel").get<size_t>();
}

void check_units_match(const fs::path& dir, const Json& m, const ParamLayout& layout) {
  const auto& units = m.at("units");
  if (static_cast<int>(units.size()) != layout.num_units()) {
    fail("{}: checkpoint has {} units, this model {} (a different model?)", dir.string(),
         units.size(), layout.num_units());
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    const size_t n = units[u].at("numel").get<size_t>();
    if (n != layout.units()[u].numel) {
      fail("{}: unit {} has {} elements in the checkpoint, {} in this model (a different model?)",
           dir.string(), layout.units()[u].name, n, layout.units()[u].numel);
    }
  }
}

// A file is named by a plain name of this directory: a '/' or a ".." would reach outside it.
ManifestFile parse_file_entry(const fs::path& dir, const Json& entry) {
  const Json* name = entry.is_object() && entry.contains("name") ? &entry.at("name") : nullptr;
  const std::string s = name != nullptr && name->is_string() ? name->get<std::string>() : "";
  if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos ||
      s.find('\0') != std::string::npos) {
    fail("{}/manifest.json: files entry {} is not a file name inside the checkpoint", dir.string(),
         entry.dump());
  }
  const auto h = parse_xxh3_hex(entry.at("xxh3").get<std::string>());
  if (!h) {
    fail("{}/manifest.json: files entry {}: xxh3 is not 16 hex digits", dir.string(), s);
  }
  return {s, {entry.at("bytes").get<uint64_t>(), *h}};
}

void read_file_list(const fs::path& dir, const Json& list, const char* key, ManifestRead& r) {
  if (!list.is_array()) fail("{}/manifest.json: {} is not a list", dir.string(), key);
  for (const auto& e : list) r.files.push_back(parse_file_entry(dir, e));
}

void read_files(const fs::path& dir, ManifestRead& r) {
  read_file_list(dir, r.manifest.at("files"), "files", r);
  r.num_shards = r.files.size();
  read_file_list(dir, r.manifest.at("other_files"), "other_files", r);
}

void read_state(ManifestRead& r) {
  const Json& m = r.manifest;
  r.optimizer_steps = m.at("optimizer_steps").get<int64_t>();
  r.state.step = m.at("step").get<int64_t>();
  r.state.sampler.epoch = m.at("sampler").at("epoch").get<uint64_t>();
  r.state.sampler.index = m.at("sampler").at("index").get<uint64_t>();
  r.state.strategy = m.at("strategy").get<std::string>();
  r.state.recipe_yaml = m.at("recipe").get<std::string>();
  r.state.metrics = m.at("metrics");
}

}  // namespace

Json manifest_file_entry(const ManifestFile& f) {
  return {{"name", f.name}, {"bytes", f.digest.bytes}, {"xxh3", xxh3_hex(f.digest.xxh3)}};
}

void digest_to_doubles(const FileDigest& d, double* out) {
  out[0] = static_cast<double>(d.bytes);
  out[1] = static_cast<double>(d.xxh3 >> 32);
  out[2] = static_cast<double>(d.xxh3 & 0xffffffffu);
}

FileDigest digest_from_doubles(const double* in) {
  return {static_cast<uint64_t>(in[0]),
          (static_cast<uint64_t>(in[1]) << 32) | static_cast<uint64_t>(in[2])};
}

ManifestRead read_manifest(const fs::path& dir, const ParamLayout& layout) {
  ManifestRead r;
  const fs::path path = dir / "manifest.json";
  // Each stage runs only while all before it passed; a field missing or of the wrong type is
  // damage, reported as one line naming the file (never nlohmann's bare exception).
  auto stage = [&](ManifestRead::Status on_error, auto fn) {
    if (r.status != ManifestRead::kOk) return;
    try {
      fn();
    } catch (const Json::exception& e) {
      r.status = ManifestRead::kDamaged;
      r.error = fmt::format("{}: {}", path.string(), e.what());
    } catch (const std::exception& e) {
      r.status = on_error;
      r.error = e.what();
    }
  };
  stage(ManifestRead::kDamaged, [&] {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) fail("{}: missing", path.string());
    r.manifest = read_json_file(path);
    if (!r.manifest.is_object()) fail("{}: not a JSON object", path.string());
  });
  stage(ManifestRead::kIncompatible, [&] { check_version(dir, r.manifest); });
  stage(ManifestRead::kDamaged, [&] { check_units_listed(dir, r.manifest); });
  stage(ManifestRead::kIncompatible, [&] { check_units_match(dir, r.manifest, layout); });
  stage(ManifestRead::kDamaged, [&] {
    read_files(dir, r);
    read_state(r);
  });
  return r;
}

}  // namespace kiln
