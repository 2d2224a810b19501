#include "kiln/train/checkpoint_manifest.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/base/error.h"

namespace kiln {

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// An unsigned integer field. nlohmann's get<uint64_t>() would take -1 as 2^64 - 1 and 1e300
// through an undefined float-to-integer cast: only a JSON unsigned integer is a count.
uint64_t get_count(const fs::path& dir, const Json& obj, const char* key) {
  const Json& v = obj.at(key);
  if (!v.is_number_unsigned()) {
    fail("{}/manifest.json: {} is {}, expected an unsigned integer", dir.string(), key, v.dump());
  }
  return v.get<uint64_t>();
}

int64_t get_step(const fs::path& dir, const Json& obj, const char* key) {
  const uint64_t v = get_count(dir, obj, key);
  if (v > static_cast<uint64_t>(kMaxCheckpointStep)) {
    fail("{}/manifest.json: {} {} is out of range (at most {})", dir.string(), key, v,
         kMaxCheckpointStep);
  }
  return static_cast<int64_t>(v);
}

// Only an integer version is one (get<int>() would read 3.5 as 3): another value is another format.
void check_version(const fs::path& dir, const Json& m) {
  const auto it = m.find("format_version");
  const bool integer = it != m.end() && it->is_number_integer();
  if (!integer || it->get<int64_t>() < kOldestCheckpointFormat ||
      it->get<int64_t>() > kCheckpointFormatVersion) {
    fail(
        "{}/manifest.json: unsupported checkpoint format version {} (this kiln reads versions {} "
        "to {})",
        dir.string(), it == m.end() ? "0" : it->dump(), kOldestCheckpointFormat,
        kCheckpointFormatVersion);
  }
}

void check_units_listed(const fs::path& dir, const Json& m) {
  const auto& units = m.at("units");
  if (!units.is_array()) {
    fail("{}/manifest.json: units is {}, expected a list of units", dir.string(), units.dump());
  }
  for (const auto& u : units) get_count(dir, u, "numel");
}

// A LoRA run's checkpoint marks its base's units frozen; a full run's has none.
bool has_frozen_units(const Json& units) {
  return std::any_of(units.begin(), units.end(),
                     [](const Json& u) { return u.value("frozen", false); });
}

void check_units_match(const fs::path& dir, const Json& m, const ParamLayout& layout) {
  const auto& units = m.at("units");
  const std::string step = dir.filename().string();
  if (has_frozen_units(units) && !layout.has_lora()) {
    fail(
        "{}/manifest.json: checkpoint {} is a LoRA run's (adapters on a frozen base); this run has "
        "no lora section (add the checkpoint's, or export its adapters and use them as "
        "model.adapter)",
        dir.string(), step);
  }
  if (!has_frozen_units(units) && layout.has_lora()) {
    fail(
        "{}/manifest.json: checkpoint {} is a full fine-tuning run's (no adapters, no frozen "
        "units); this run has a lora section (train from its exported model as model.path "
        "instead)",
        dir.string(), step);
  }
  if (static_cast<int>(units.size()) != layout.num_units()) {
    fail("{}/manifest.json: checkpoint has {} units, this model {} (a different model?)",
         dir.string(), units.size(), layout.num_units());
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    const bool frozen = units[u].value("frozen", false);
    if (frozen == layout.units()[u].trainable) {
      fail("{}/manifest.json: unit {} {} in the checkpoint but {} in this run (LoRA {})",
           dir.string(), layout.units()[u].name, frozen ? "is frozen" : "trains",
           frozen ? "trains" : "is frozen",
           frozen ? "adapters on a frozen base, then a full run" : "after full fine-tuning");
    }
    const size_t n = units[u].at("numel").get<size_t>();
    if (n != layout.units()[u].numel) {
      fail(
          "{}/manifest.json: unit {} has {} elements in the checkpoint, {} in this model (a "
          "different model?)",
          dir.string(), layout.units()[u].name, n, layout.units()[u].numel);
    }
  }
}

// A file is named by a plain name of this directory: a '/' or a ".." would reach outside it,
// and a control character (a newline) is no name kiln writes.
ManifestFile parse_file_entry(const fs::path& dir, const Json& entry) {
  const Json* name = entry.is_object() && entry.contains("name") ? &entry.at("name") : nullptr;
  const std::string s = name != nullptr && name->is_string() ? name->get<std::string>() : "";
  const bool control = std::any_of(s.begin(), s.end(), [](char ch) {
    return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
  });
  if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos || control) {
    fail("{}/manifest.json: files entry {} is not a file name inside the checkpoint", dir.string(),
         entry.dump());
  }
  const Json& hex = entry.at("xxh3");
  const auto h = hex.is_string() ? parse_xxh3_hex(hex.get<std::string>()) : std::nullopt;
  if (!h) {
    fail("{}/manifest.json: files entry {}: xxh3 is not 16 hex digits", dir.string(),
         Json(s).dump());
  }
  return {s, {get_count(dir, entry, "bytes"), *h}};
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

void read_state(const fs::path& dir, ManifestRead& r) {
  const Json& m = r.manifest;
  r.optimizer_steps = get_step(dir, m, "optimizer_steps");
  r.state.step = get_step(dir, m, "step");
  r.state.format_version = static_cast<int>(m.at("format_version").get<int64_t>());
  const uint64_t world = get_count(dir, m, "world_size");
  if (world < 1 || world > (1u << 24)) {
    fail("{}/manifest.json: world_size {} is out of range", dir.string(), world);
  }
  r.state.world_size = static_cast<int>(world);
  r.state.sampler.epoch = get_count(dir, m.at("sampler"), "epoch");
  r.state.sampler.position =
      get_count(dir, m.at("sampler"), r.state.format_version >= 4 ? "position" : "index");
  if (r.state.format_version >= 4) {
    const Json& data = m.at("data");
    if (!data.is_array()) fail("{}/manifest.json: data is not a list", dir.string());
    for (const Json& e : data) {
      const Json& name = e.at("name");
      const Json& hex = e.at("xxh3");
      const auto h = hex.is_string() ? parse_xxh3_hex(hex.get<std::string>()) : std::nullopt;
      if (!name.is_string() || !h) {
        fail("{}/manifest.json: data entry {} is not a path with 16 hex digits of xxh3",
             dir.string(), e.dump());
      }
      r.state.data_files.push_back({name.get<std::string>(), {get_count(dir, e, "bytes"), *h}});
    }
  }
  const auto rule = m.find("holdout_rule");
  r.state.holdout_rule = rule == m.end() ? 1 : static_cast<int>(get_count(dir, m, "holdout_rule"));
  if (const auto b = m.find("base"); b != m.end()) {
    const Json& hex = b->at("xxh3");
    const auto h = hex.is_string() ? parse_xxh3_hex(hex.get<std::string>()) : std::nullopt;
    if (!h) fail("{}/manifest.json: base: xxh3 is not 16 hex digits", dir.string());
    r.state.base = FileDigest{get_count(dir, *b, "bytes"), *h};
  }
  r.state.strategy = m.at("strategy").get<std::string>();
  r.state.recipe_yaml = m.at("recipe").get<std::string>();
  r.state.metrics = m.at("metrics");
}

}  // namespace

Json manifest_json(const CheckpointState& st, const ParamLayout& layout, int world_size,
                   int64_t optimizer_steps) {
  Json units = Json::array();
  for (const auto& u : layout.units()) {
    Json unit = {{"name", u.name}, {"numel", u.numel}};
    if (!u.trainable) unit["frozen"] = true;  // not in the shards: it comes from the base model
    units.push_back(std::move(unit));
  }
  Json data = Json::array();
  for (const auto& f : st.data_files) {
    data.push_back(
        {{"name", f.path}, {"bytes", f.digest.bytes}, {"xxh3", xxh3_hex(f.digest.xxh3)}});
  }
  Json m = {{"format_version", kCheckpointFormatVersion},
            {"kiln_version", "0.1.0"},
            {"step", st.step},
            {"world_size", world_size},
            {"strategy", st.strategy},
            {"units", units},
            {"sampler", {{"epoch", st.sampler.epoch}, {"position", st.sampler.position}}},
            {"data", data},
            {"holdout_rule", st.holdout_rule},
            {"optimizer_steps", optimizer_steps},
            {"recipe", st.recipe_yaml},
            {"recipe_hash", fmt::format("{:016x}", fnv1a(st.recipe_yaml))},
            {"metrics", st.metrics}};
  if (st.base) m["base"] = {{"bytes", st.base->bytes}, {"xxh3", xxh3_hex(st.base->xxh3)}};
  return m;
}

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
  const fs::path path = dir / "manifest.json";
  std::string text;
  try {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) fail("{}: missing", path.string());
    text = read_file(path);
  } catch (const std::exception& e) {
    ManifestRead r;
    r.status = ManifestRead::kDamaged;
    r.error = e.what();
    return r;
  }
  return parse_manifest(text, dir, layout);
}

ManifestRead parse_manifest(std::string_view text, const fs::path& dir, const ParamLayout& layout) {
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
    r.manifest = parse_json(text, path.string());
    if (!r.manifest.is_object()) fail("{}: not a JSON object", path.string());
  });
  stage(ManifestRead::kIncompatible, [&] { check_version(dir, r.manifest); });
  stage(ManifestRead::kDamaged, [&] { check_units_listed(dir, r.manifest); });
  stage(ManifestRead::kIncompatible, [&] { check_units_match(dir, r.manifest, layout); });
  stage(ManifestRead::kDamaged, [&] {
    read_files(dir, r);
    read_state(dir, r);
  });
  if (r.status != ManifestRead::kOk) {
    r.files.clear();
    r.num_shards = 0;
  }
  return r;
}

}  // namespace kiln
