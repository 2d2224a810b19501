// kiln doctor, part 3: the report as JSON (for scripts and CI) and as aligned text lines.
#include <fmt/format.h>

#include "kiln/doctor/doctor.h"
#include "kiln/doctor/doctor_facts.h"

namespace kiln {

namespace {

Json or_null(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

}  // namespace

Json doctor_json(const DoctorReport& r, const std::vector<Requirement>& requirements) {
  bool ok = !r.failed();
  Json reqs = Json::array();
  for (const auto& q : requirements) {
    ok = ok && q.met;
    reqs.push_back({{"requirement", q.text}, {"met", q.met}, {"reason", q.reason}});
  }
  Json ifaces = Json::array();
  for (const auto& i : r.net.interfaces) {
    ifaces.push_back(
        {{"name", i.name}, {"address", i.address}, {"loopback", i.is_loopback}, {"up", i.is_up}});
  }
  Json env = Json::object();
  for (const auto& [k, v] : r.env) env[k] = v;
  Json gpus = Json::array();
  for (const auto& d : r.gpu.devices) {
    gpus.push_back({{"model", d.model}, {"bus", d.bus}, {"memory", or_null(d.memory)}});
  }
  Json backend = nullptr;  // a CPU-only build
  if (r.cuda_backend) {
    const CudaBackendProbe& b = *r.cuda_backend;
    Json devices = Json::array();
    for (const auto& d : b.gpus) {
      devices.push_back({{"index", d.index},
                         {"name", d.name},
                         {"memory_bytes", d.memory_bytes},
                         {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
                         {"multiprocessors", d.multiprocessors}});
    }
    backend = {{"devices", devices},
               {"no_gpu_reason", or_null(b.no_gpu_reason)},
               {"driver_version", b.driver_version},
               {"runtime_version", b.runtime_version},
               {"cublaslt_version", b.cublaslt_version},
               {"nccl_version", b.nccl_version}};
  }
  Json checks = Json::array();
  for (const auto& c : r.checks) {
    Json j{{"area", c.area}, {"level", level_name(c.level)}, {"message", c.message}};
    if (!c.details.empty()) j["details"] = c.details;
    checks.push_back(j);
  }
  Json shm = nullptr;
  if (r.memory.shm)
    shm = {{"total_bytes", r.memory.shm->total}, {"free_bytes", r.memory.shm->free}};
  const auto& g = r.gpu;
  return {
      {"kiln_version", KILN_VERSION},
      {"ok", ok},
      {"failures", r.count(Level::kFail)},
      {"warnings", r.count(Level::kWarn)},
      {"cpu",
       {{"model", r.cpu.model},
        {"logical_cpus", r.cpu.logical_cpus},
        {"avx2", r.cpu.avx2},
        {"avx512f", r.cpu.avx512f},
        {"avx512_bf16", r.cpu.avx512_bf16},
        {"amx", r.cpu.amx},
        {"blas_core", or_null(r.cpu.blas_core)}}},
      {"memory",
       {{"total_bytes", r.memory.total}, {"available_bytes", r.memory.available}, {"shm", shm}}},
      {"network",
       {{"interfaces", ifaces},
        {"kiln_socket_ifname", or_null(r.net.ifname_spec)},
        {"multi_node_interface", or_null(r.net.multi_node)},
        {"multi_node_error", or_null(r.net.multi_node_error)},
        {"single_node_interface", or_null(r.net.single_node)}}},
      {"env", env},
      {"gpu",
       {{"driver_loaded", g.driver_loaded},
        {"driver_version", or_null(g.driver_version)},
        {"devices", gpus},
        {"cuda_runtime", or_null(g.cuda_runtime)},
        {"cuda_runtime_source", or_null(g.cuda_runtime_source)},
        {"cuda_driver", or_null(g.cuda_driver)},
        {"libcuda_path", or_null(g.libcuda_path)},
        {"forward_compat", g.forward_compat},
        {"compat_dirs", or_null(g.compat_dirs)},
        {"nccl_version", or_null(g.nccl_version)},
        {"nccl_path", or_null(g.nccl_path)},
        {"net_plugin_wanted", g.net_plugin_wanted},
        {"net_plugin", or_null(g.net_plugin)},
        {"net_plugins_found", g.net_plugins_found}}},
      {"cuda_backend", backend},
      {"efa",
       {{"devices", r.efa.devices},
        {"uverbs", r.efa.uverbs},
        {"other_rdma", r.efa.other_rdma},
        {"libfabric_efa", r.efa.libfabric_efa},
        {"ofi_plugin", r.efa.ofi_plugin}}},
      {"gloo",
       {{"ran", r.gloo.ran},
        {"ok", r.gloo.ok},
        {"transport", r.gloo.transport ? Json(transport_text(*r.gloo.transport)) : Json(nullptr)},
        {"transport_info",
         r.gloo.transport ? transport_info_json(*r.gloo.transport) : Json(nullptr)},
        {"error", or_null(r.gloo.error)},
        {"bytes", r.gloo.bytes},
        {"seconds", r.gloo.seconds},
        {"busbw_gbps", r.gloo.busbw_gbps}}},
      {"checks", checks},
      {"requirements", reqs},
  };
}

CudaProbeVerdict cuda_probe_verdict(const std::optional<CudaBackendProbe>& backend) {
  if (!backend) return {false, "this kiln was built without the CUDA backend"};
  const CudaBackendProbe& b = *backend;
  if (b.gpus.empty()) return {false, fmt::format("no GPU visible ({})", b.no_gpu_reason)};
  return {true, fmt::format("{} GPU(s): {}; driver CUDA {}, runtime CUDA {}", b.gpus.size(),
                            b.gpus[0].name, cuda_version_string(b.driver_version),
                            cuda_version_string(b.runtime_version))};
}

std::string doctor_text(const DoctorReport& r, const std::vector<Requirement>& requirements) {
  std::string out;
  for (const auto& c : r.checks) {
    out += fmt::format("{:<5} {:<7} {}\n", level_name(c.level), c.area, c.message);
    for (const auto& d : c.details) out += fmt::format("{:14}{}\n", "", d);
  }
  int unmet = 0;
  for (const auto& q : requirements) {
    unmet += !q.met;
    out += fmt::format("{:<5} {:<7} {}: {}\n", q.met ? "ok" : "FAIL", "require", q.text, q.reason);
  }
  const int failures = r.count(Level::kFail) + unmet;
  out += fmt::format("doctor: {} ({} failure(s), {} warning(s))\n", failures ? "FAIL" : "ok",
                     failures, r.count(Level::kWarn));
  return out;
}

}  // namespace kiln
