#include "kiln/train/resume_checks.h"

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/data/mixture.h"
#include "kiln/model_files/base_fingerprint.h"
#include "kiln/train/checkpoint_manifest.h"
#include "kiln/train/run_identity.h"

namespace kiln {

void check_same_run(const fs::path& checkpoint, const Recipe& written_with, const Recipe& now,
                    bool refuse, bool verbose) {
  const auto change = run_identity_change(written_with, now);
  if (!change) return;
  const std::string what =
      fmt::format("{} was written by another run: {} was {}, is {}", checkpoint.string(),
                  change->key, change->before, change->after);
  if (refuse) {
    fail(
        "train.resume=auto: {} (resume with the old value; to start over use output.overwrite=true "
        "or another output.dir)",
        what);
  }
  if (verbose) KILN_LOG_WARN("train.resume: {}; continuing from it as asked", what);
}

void note_step_budget(const fs::path& checkpoint, const Recipe& written_with, const Recipe& now,
                      int64_t max_steps, bool verbose) {
  if (!verbose) return;
  const auto& a = written_with.train;
  const auto& b = now.train;
  std::string what;
  if (a.epochs != b.epochs) {
    what = fmt::format("train.epochs was {}, is {}", a.epochs, b.epochs);
  } else if (b.epochs == 0 && a.max_steps != b.max_steps) {
    what = fmt::format("train.max_steps was {}, is {}", a.max_steps, b.max_steps);
  } else {
    return;
  }
  KILN_LOG_WARN("resuming {} with another step budget: {}; the run now ends at step {}{}",
                checkpoint.string(), what, max_steps,
                now.schedule.name == ScheduleKind::kConstant
                    ? std::string()
                    : fmt::format(" and the {} schedule decays to it",
                                  name_of(kScheduleNames, now.schedule.name)));
}

void check_data_unchanged(const fs::path& checkpoint, const CheckpointState& st, const Recipe& r,
                          const std::vector<FileDigest>& now, bool verbose) {
  if (st.format_version < 4) {
    if (verbose) {
      KILN_LOG_WARN("{}: checkpoint format {} records no data fingerprints; not checked",
                    checkpoint.string(), st.format_version);
    }
    return;
  }
  if (r.data.eval_split > 0 && st.holdout_rule != kHoldOutRule) {
    const std::string what = fmt::format(
        "checkpoint {} held out data.eval_split's examples by rule {} (per listing of a file, an "
        "older kiln); this kiln holds them out by content (rule {}), so the examples it trains "
        "on differ",
        checkpoint.string(), st.holdout_rule, kHoldOutRule);
    if (!r.data.allow_changed) {
      fail("train.resume: {}: start a new run, or set data.allow_changed=true to resume regardless",
           what);
    }
    if (verbose) KILN_LOG_WARN("train.resume: {}; continuing (data.allow_changed=true)", what);
  }
  for (size_t i = 0; i < st.data_files.size() && i < now.size() && i < r.data.train.size(); ++i) {
    const FileDigest& was = st.data_files[i].digest;
    if (was == now[i]) continue;
    const std::string what = fmt::format(
        "data.train file {} changed since checkpoint {} (it had {} bytes, xxh3 {}; it has {} "
        "bytes, xxh3 {})",
        r.data.train[i].path, checkpoint.string(), was.bytes, xxh3_hex(was.xxh3), now[i].bytes,
        xxh3_hex(now[i].xxh3));
    if (!r.data.allow_changed) {
      fail(
          "train.resume: {}: the run would continue its data order over other examples; restore "
          "the file, or set data.allow_changed=true to resume regardless",
          what);
    }
    if (verbose) KILN_LOG_WARN("train.resume: {}; continuing (data.allow_changed=true)", what);
  }
}

void check_base_unchanged(const fs::path& checkpoint, const CheckpointState& st, const Recipe& r,
                          const std::optional<FileDigest>& now) {
  if (!st.base || !now || *st.base == *now) return;
  fail(
      "train.resume: model.path {} is not the base checkpoint {}'s adapters were trained on (it "
      "recorded {}; model.path has {}): restore that base, or start a new run from the adapters "
      "(kiln export --checkpoint {} --out DIR, then model.adapter=DIR)",
      r.model.path, checkpoint.string(), fingerprint_text(*st.base), fingerprint_text(*now),
      checkpoint.string());
}

SamplerState resumed_data_position(const fs::path& checkpoint, const CheckpointState& st,
                                   const Recipe& written_with) {
  if (st.format_version >= 4) return st.sampler;
  SamplerState pos = st.sampler;
  if (!written_with.data.pack) {
    pos.position = st.sampler.position *
                   static_cast<uint64_t>(written_with.train.micro_batch_size) *
                   static_cast<uint64_t>(st.world_size);
  } else if (st.world_size != 1) {
    fail(
        "{}: checkpoint format {} recorded a packed run's data position per rank ({} ranks), "
        "which this kiln (format {}) cannot continue exactly; resume it with the kiln that wrote "
        "it, or start over",
        checkpoint.string(), st.format_version, st.world_size, kCheckpointFormatVersion);
  }
  return pos;
}

}  // namespace kiln
