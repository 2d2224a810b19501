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

// Each rank's TransportInfo travels as its JSON text in a slot of 16-bit elements through
// all_gather, which only copies them; the slot is as long as the longest rank's text.
std::string slot_text(const char* slot, size_t bytes) { return {slot, strnlen(slot, bytes)}; }

std::vector<std::string> texts(const std::vector<TransportInfo>& infos) {
  std::vector<std::string> out;
  for (const auto& t : infos) out.push_back(transport_text(t));
  return out;
}

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

std::vector<TransportInfo> gather_transports(Communicator& comm) {
  const int n = comm.world_size();
  const std::string mine = transport_info_json(comm.transport_info()).dump();
  double longest = static_cast<double>(mine.size());
  comm.all_reduce(&longest, size_t{1}, ReduceOp::kMax);
  const size_t slot = (static_cast<size_t>(longest) + 2) / 2 * 2;  // a NUL after the longest
  std::vector<uint16_t> in(slot / 2, 0), all(n * slot / 2, 0);
  std::memcpy(in.data(), mine.data(), mine.size());
  comm.all_gather_async(all.data(), in.data(), in.size(), DType::BF16, nullptr)->wait_host();
  std::vector<TransportInfo> out;
  for (int r = 0; r < n; ++r) {
    const std::string text = slot_text(reinterpret_cast<const char*>(all.data()) + r * slot, slot);
    const std::string what = fmt::format("rank {}'s transport", r);
    out.push_back(transport_info_from_json(parse_json(text, what), what));
  }
  return out;
}

Json run_meta_json(const Recipe& r, const WorkerIdentity& id, const std::string& strategy,
                   const std::vector<TransportInfo>& infos, const std::string& started_at) {
  const std::vector<std::string> transports = texts(infos);
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
  const std::vector<TransportInfo> infos = gather_transports(ctx.comm());
  const std::vector<std::string> transports = texts(infos);
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
                      run_meta_json(r, id, strategy, infos, utc_now()).dump(2) + "\n");
  }
  if (!r.dist.require_transport) return;
  const TransportKind kind = *r.dist.require_transport;
  const std::string want = name_of(kTransportKindNames, kind);
  // run_meta.json is on disk before any rank fails, so what was in use is on record.
  ctx.comm().barrier();
  for (size_t i = 0; i < transports.size(); ++i) {
    if (!transport_satisfies(infos[i], kind)) {
      fail("dist.require_transport={} but rank {} uses {}{}", want, i, transports[i],
           kind == TransportKind::kEfa
               ? " (kiln doctor --require transport=efa says what is missing)"
               : "");
    }
  }
}

}  // namespace kiln
