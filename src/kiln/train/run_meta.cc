#include "kiln/train/run_meta.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/log.h"
#include "kiln/comm/transport.h"

namespace kiln {

namespace {

// Transport strings travel as fixed slots of 16-bit elements through all_gather, which only
// copies them ("gloo-tcp eth0 10.0.0.2" is far shorter than a slot).
constexpr size_t kSlotBytes = 256;

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

}  // namespace

std::vector<std::string> gather_transports(Communicator& comm) {
  const int n = comm.world_size();
  std::vector<uint16_t> mine(kSlotBytes / 2, 0), all(n * kSlotBytes / 2, 0);
  const std::string t = comm.transport().substr(0, kSlotBytes - 1);
  std::memcpy(mine.data(), t.data(), t.size());
  comm.all_gather_async(all.data(), mine.data(), mine.size(), DType::BF16, nullptr)->wait_host();
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) {
    const char* p = reinterpret_cast<const char*>(all.data()) + r * kSlotBytes;
    out.emplace_back(p, strnlen(p, kSlotBytes));
  }
  return out;
}

Json run_meta_json(const Recipe& r, const WorkerIdentity& id, const std::string& strategy,
                   const std::vector<std::string>& transports, const std::string& started_at) {
  return {
      {"kiln_version", KILN_VERSION},
      {"started_at", started_at},
      {"host", host_name()},
      {"world_size", id.world_size},
      {"num_nodes", id.num_nodes},
      {"local_world_size", id.local_world_size},
      {"strategy", strategy},
      {"transport", transports.empty() ? "" : transports[0]},
      {"transports", transports},
      {"require_transport",
       r.dist.require_transport ? name_of(kTransportKindNames, *r.dist.require_transport) : ""},
      {"topology_source", id.topology_source},
      {"launcher", id.launcher},
      {"model", r.model.path},
      {"output_dir", r.output.dir},
  };
}

void record_run_start(const Recipe& r, WorkerContext& ctx, const std::string& strategy) {
  const std::vector<std::string> transports = gather_transports(ctx.comm());
  // Distinct transports for the log: one line however many ranks.
  std::string distinct;
  for (size_t i = 0; i < transports.size(); ++i) {
    bool seen = false;
    for (size_t j = 0; j < i; ++j) seen = seen || transports[j] == transports[i];
    if (!seen)
      distinct += fmt::format("{}{} (rank {})", distinct.empty() ? "" : ", ", transports[i], i);
  }
  const WorkerIdentity& id = ctx.identity();
  if (id.rank == 0) {
    KILN_LOG_INFO("transport: {}; {} rank(s), topology from {} ({})", distinct, transports.size(),
                  id.topology_source, id.launcher);
    const fs::path dir = r.output.dir;
    fs::create_directories(dir);
    write_file_atomic(dir / "run_meta.json",
                      run_meta_json(r, id, strategy, transports, utc_now()).dump(2) + "\n");
  }
  if (!r.dist.require_transport) return;
  const TransportKind kind = *r.dist.require_transport;
  const std::string want = name_of(kTransportKindNames, kind);
  // run_meta.json is on disk before any rank fails, so what was in use is on record.
  ctx.comm().barrier();
  for (size_t i = 0; i < transports.size(); ++i) {
    if (!transport_satisfies(transports[i], kind)) {
      fail("dist.require_transport={} but rank {} uses {}{}", want, i, transports[i],
           kind == TransportKind::kEfa
               ? " (kiln doctor --require transport=efa says what is missing)"
               : "");
    }
  }
}

}  // namespace kiln
