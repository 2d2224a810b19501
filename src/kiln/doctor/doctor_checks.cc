// kiln doctor, part 2: judging the facts (doctor_probe.cc) into ok/note/warn/FAIL lines, and
// --require. Thresholds and the reasons behind them are in docs/doctor.md.
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "kiln/base/error.h"
#include "kiln/comm/transport.h"
#include "kiln/doctor/doctor.h"
#include "kiln/doctor/doctor_facts.h"
#include "kiln/kernels/device/cpu_features.h"

namespace kiln {

namespace {

// The transport of a Gloo probe that formed its group (ok: probe_gloo_loopback sets both).
const TransportInfo& probed_transport(const GlooProbe& g) {
  KILN_CHECK(g.ok && g.transport.has_value(), "a Gloo probe that formed its group has a transport");
  return *g.transport;
}

// NCCL places its intra-node buffers in /dev/shm; Docker's default is 64 MiB, which fails with
// "Bus error" or "unhandled system error" once several GPUs share a node. 1 GiB is ample.
constexpr uint64_t kMinShmBytes = uint64_t{1} << 30;

std::string gib(uint64_t b) {
  return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1 << 30));
}

std::string size_text(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return gib(b);
  return fmt::format("{} MiB", b >> 20);
}

// OpenBLAS's fallbacks when it does not recognise a CPU (see blas_setup.h).
bool generic_blas_core(const std::string& core) {
  return core == "Prescott" || core == "Core2" || core == "Nehalem" || core == "Sandybridge" ||
         core == "Generic" || core == "unknown";
}

// "12.2" < "12.4" by (major, minor).
bool version_less(const std::string& a, const std::string& b) {
  auto parse = [](const std::string& s) {
    int major = 0, minor = 0;
    const char* end = s.data() + s.size();
    auto r = std::from_chars(s.data(), end, major);
    if (r.ptr != end && *r.ptr == '.') std::from_chars(r.ptr + 1, end, minor);
    return std::pair{major, minor};
  };
  return parse(a) < parse(b);
}

class Judge {
 public:
  Judge(DoctorReport& r, const DoctorProbes& p) : r_(r), p_(p) {}

  void all() {
    cpu();
    memory();
    network();
    environment();
    gpu();
    backend();
    efa();
    gloo();
  }

 private:
  DoctorReport& r_;
  const DoctorProbes& p_;

  DoctorCheck& add(const char* area, Level level, std::string message) {
    r_.checks.push_back({area, level, std::move(message), {}});
    return r_.checks.back();
  }
  std::string env(const char* k) const { return env_value(p_.env, k); }

  void cpu() {
    const auto& c = r_.cpu;
    std::vector<std::string> have;
    if (c.avx2) have.emplace_back("AVX2");
    if (c.avx512f) have.emplace_back("AVX-512");
    if (c.avx512_bf16) have.emplace_back("AVX512_BF16");
    if (c.amx) have.emplace_back("AMX");
    const std::string text = fmt::format(
        "{}: {} logical CPUs; {}", c.model.empty() ? "unknown CPU" : c.model, c.logical_cpus,
        have.empty() ? "no AVX2" : fmt::format("{}", fmt::join(have, " ")));
    add("cpu", c.avx2 ? Level::kOk : Level::kWarn,
        c.avx2 ? text : text + " (kernels and BLAS run several times slower without AVX2)");
    cpu_cap();
    if (c.blas_core.empty()) return;
    if (!generic_blas_core(c.blas_core)) {
      add("blas", Level::kOk, fmt::format("OpenBLAS core {}", c.blas_core));
    } else if (c.avx2) {
      const std::string set = env("OPENBLAS_CORETYPE");
      add("blas", Level::kFail,
          fmt::format("OpenBLAS runs generic '{}' kernels on a CPU with {}: GEMMs about 4x slower; "
                      "{}",
                      c.blas_core, c.avx512f ? "AVX-512" : "AVX2",
                      set.empty() ? "kiln's re-exec with OPENBLAS_CORETYPE did not take effect"
                                  : "unset OPENBLAS_CORETYPE=" + set));
    } else {
      add("blas", Level::kNote,
          fmt::format("OpenBLAS core {} (this CPU offers nothing faster)", c.blas_core));
    }
  }

  // KILN_CPU_ISA read as every kiln command reads it (cpu_features_for), against this CPU's level.
  void cpu_cap() {
    const auto& c = r_.cpu;
    const CpuIsa level = c.amx           ? CpuIsa::kAmx
                         : c.avx512_bf16 ? CpuIsa::kAvx512Bf16
                         : c.avx512f     ? CpuIsa::kAvx512
                         : c.avx2        ? CpuIsa::kAvx2
                                         : CpuIsa::kBaseline;
    const std::string cap = env("KILN_CPU_ISA");
    try {
      const CpuFeatures f = cpu_features_for(level, cap.c_str());
      if (f.capped()) {
        add("cpu", Level::kNote,
            fmt::format("KILN_CPU_ISA={}: kiln uses no CPU feature above {} (this CPU: {}){}", cap,
                        cpu_isa_name(f.isa), cpu_isa_name(f.cpu),
                        f.avx512_bf16() ? "" : "; bf16 products run in fp32"));
      }
    } catch (const Error& e) {
      add("cpu", Level::kFail, e.what());
    }
  }

  void memory() {
    const auto& m = r_.memory;
    add("memory", Level::kOk,
        fmt::format("{} total, {} available", gib(m.total), gib(m.available)));
    if (!m.shm) {
      add("shm", Level::kWarn, "/dev/shm is missing: NCCL's shared-memory transport needs it");
    } else if (m.shm->total < kMinShmBytes) {
      add("shm", Level::kWarn,
          fmt::format("/dev/shm is {} (< 1 GiB): NCCL between GPUs of a node fails with 'Bus "
                      "error'; docker run --shm-size=8g, or a memory emptyDir on /dev/shm",
                      size_text(m.shm->total)));
    } else {
      add("shm", Level::kOk,
          fmt::format("/dev/shm {} ({} free)", size_text(m.shm->total), size_text(m.shm->free)));
    }
  }

  void network() {
    const auto& n = r_.net;
    std::vector<std::string> listed;
    for (const auto& i : n.interfaces) {
      listed.push_back(fmt::format("{} {}{}{}", i.name, i.address,
                                   i.is_loopback ? " (loopback)" : "", i.is_up ? "" : " (down)"));
    }
    const std::string spec =
        n.ifname_spec.empty() ? "" : fmt::format(" (KILN_SOCKET_IFNAME={})", n.ifname_spec);
    auto with_address = [&](const std::string& name) {
      for (const auto& i : n.interfaces) {
        if (i.name == name) return name + " " + i.address;
      }
      return name.empty() ? std::string("none") : name;
    };
    if (!n.multi_node.empty()) {
      add("net", Level::kOk,
          fmt::format("multi-node: {}; one node: {}{}", with_address(n.multi_node),
                      with_address(n.single_node), spec))
          .details = listed;
    } else {
      add("net", Level::kWarn,
          fmt::format("this host cannot join a multi-node job: {}", n.multi_node_error))
          .details = listed;
    }
  }

  // Known mistakes in the environment, then the listing.
  void environment() {
    loopback_specs();
    const bool efa = !r_.efa.devices.empty();
    const std::string provider = env("FI_PROVIDER");
    if (provider.find("efa") != std::string::npos && !efa) {
      add("env", Level::kWarn,
          fmt::format("FI_PROVIDER={} but this host has no EFA device: libfabric finds no "
                      "provider and NCCL's OFI plugin fails (set it only on EFA instances)",
                      provider));
    }
    std::vector<std::string> fi_efa;
    for (const auto& [k, v] : p_.env) {
      if (k.starts_with("FI_EFA_")) fi_efa.push_back(k);
    }
    if (!fi_efa.empty() && !efa) {
      add("env", Level::kWarn,
          fmt::format("{} set but this host has no EFA device: wrong image or instance type?",
                      fmt::join(fi_efa, ", ")));
    }
    const std::string plugin = env("NCCL_NET_PLUGIN");
    if (!plugin.empty() && plugin != "none" && r_.gpu.net_plugin.empty()) {
      add("env", Level::kWarn,
          fmt::format("NCCL_NET_PLUGIN={}: not found (looked for {} in LD_LIBRARY_PATH and the "
                      "loader's directories); NCCL falls back to TCP sockets",
                      plugin, fmt::join(nccl_plugin_candidates(plugin), ", ")));
    }
    for (const auto& dir : library_dirs_from_env()) {
      if (fs::exists(host_path(p_.root, dir))) continue;
      for (const char* w : {"ofi", "nccl", "efa", "libfabric", "cuda"}) {
        if (dir.find(w) == std::string::npos) continue;
        add("env", Level::kWarn,
            fmt::format("LD_LIBRARY_PATH names {}, which does not exist{}", dir,
                        dir.find("ofi") != std::string::npos
                            ? ": the aws-ofi-nccl plugin will not load from it"
                            : ""));
        break;
      }
    }
    const std::pair<const char*, const char*> notes[] = {
        {"NCCL_P2P_DISABLE",
         "GPUs of a node exchange data through host memory, not NVLink/PCIe "
         "peer-to-peer"},
        {"NCCL_IB_DISABLE",
         "NCCL will not use InfiniBand/RoCE verbs (EFA goes through the OFI "
         "plugin and is unaffected)"},
        {"NCCL_SHM_DISABLE", "GPUs of a node cannot use shared memory between processes"},
    };
    for (const auto& [k, why] : notes) {
      if (env(k) == "1") add("env", Level::kNote, fmt::format("{}=1: {}", k, why));
    }
    std::vector<std::string> listing;
    for (const auto& [k, v] : r_.env) listing.push_back(k + "=" + v);
    if (listing.empty()) {
      add("env", Level::kOk, "no NCCL_*, FI_*, KILN_*, GLOO_* or library-path variables set");
    } else {
      add("env", Level::kOk, fmt::format("{} relevant variable(s) set", listing.size())).details =
          listing;
    }
  }

  std::vector<std::string> library_dirs_from_env() const {
    std::vector<std::string> out;
    std::string s = env("LD_LIBRARY_PATH");
    for (size_t b = 0; b <= s.size();) {
      const size_t e = std::min(s.find(':', b), s.size());
      if (e > b) out.push_back(s.substr(b, e - b));
      b = e + 1;
    }
    return out;
  }

  // An interface list that lets loopback in: peers on other hosts cannot reach 127.0.0.1, so a
  // multi-node NCCL or Gloo job fails or hangs at its first collective.
  void loopback_specs() {
    std::vector<std::string> loopbacks;
    for (const auto& i : r_.net.interfaces) {
      if (i.is_loopback) loopbacks.push_back(i.name);
    }
    if (loopbacks.empty()) loopbacks.emplace_back("lo");
    for (const char* var : {"KILN_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
      const std::string spec = env(var);
      if (spec.empty()) continue;
      // kiln itself never binds loopback for remote peers; an exclude list cannot force it to.
      if (std::string_view(var) == "KILN_SOCKET_IFNAME" && spec[0] == '^') continue;
      for (const auto& lo : loopbacks) {
        if (!interface_selected(spec, lo)) continue;
        add("env", Level::kWarn,
            fmt::format("{}={} lets in loopback {}: peers on other hosts cannot reach it, so a "
                        "multi-node job fails or hangs (harmless on one node){}",
                        var, spec, lo,
                        spec[0] == '^' ? fmt::format("; add {} to the list", lo) : ""));
        break;
      }
    }
  }

  void gpu() {
    const auto& g = r_.gpu;
    if (!g.driver_loaded && g.devices.empty()) {
      add("gpu", Level::kNote,
          "no NVIDIA GPU: driver not loaded (/proc/driver/nvidia/version missing); checking the "
          "CPU path");
    } else if (g.devices.empty()) {
      add("gpu", Level::kWarn,
          fmt::format("NVIDIA driver {} loaded but no GPU visible (CUDA_VISIBLE_DEVICES, or the "
                      "container was started without GPUs)",
                      g.driver_version));
    } else {
      std::vector<std::string> listed;
      for (const auto& d : g.devices) {
        listed.push_back(fmt::format("{} {}{}", d.bus, d.model.empty() ? "?" : d.model,
                                     d.memory.empty() ? "" : ", " + d.memory));
      }
      add("gpu", Level::kOk,
          fmt::format("driver {}, {} GPU(s)", g.driver_version.empty() ? "?" : g.driver_version,
                      g.devices.size()))
          .details = listed;
    }
    const bool gpus = !g.devices.empty();
    if (gpus || !g.cuda_runtime.empty() || !g.cuda_driver.empty()) cuda();
    if (!g.nccl_version.empty()) {
      add("nccl", Level::kOk,
          fmt::format("NCCL {} ({}); net plugin: {}", g.nccl_version, g.nccl_path,
                      g.net_plugin.empty() ? "none (TCP sockets)" : g.net_plugin))
          .details = plugin_details();
    } else if (gpus) {
      add("nccl", Level::kWarn, "libnccl.so.2 not found: GPU workers cannot communicate");
    }
  }

  // NCCL_NET_PLUGIN and every libnccl-net*.so on the loader path, under the nccl line.
  std::vector<std::string> plugin_details() const {
    std::vector<std::string> out;
    const std::string wanted = env("NCCL_NET_PLUGIN");
    out.push_back("NCCL_NET_PLUGIN: " + (wanted.empty() ? "unset (libnccl-net.so)" : wanted));
    for (const auto& f : r_.gpu.net_plugins_found) out.push_back("found " + f);
    return out;
  }

  // The linked CUDA backend: a CPU-only build, a CUDA build that sees no GPU (a note: training
  // falls back to the CPU unless train.device=cuda or --require device=cuda asks otherwise), or
  // the GPUs with the driver, runtime, cuBLASLt and NCCL versions.
  void backend() {
    if (!r_.cuda_backend) {
      add("backend", Level::kNote, "CPU only: this kiln was built without the CUDA backend");
      return;
    }
    const CudaBackendProbe& b = *r_.cuda_backend;
    const std::string versions =
        fmt::format("driver {}, runtime CUDA {}, cuBLASLt {}, NCCL {}",
                    b.driver_version ? "CUDA " + cuda_version_string(b.driver_version) : "none",
                    cuda_version_string(b.runtime_version), b.cublaslt_version,
                    b.nccl_version ? nccl_version_string(b.nccl_version) : "not answering");
    if (b.gpus.empty()) {
      add("backend", r_.gpu.driver_loaded ? Level::kWarn : Level::kNote,
          fmt::format("CUDA backend: no GPU visible ({}); train.device=auto runs on the CPU; {}",
                      b.no_gpu_reason, versions));
      return;
    }
    std::vector<std::string> listed;
    bool old_gpu = false;
    for (const auto& d : b.gpus) {
      listed.push_back(fmt::format("{} {}, {}, compute capability {}.{}, {} SMs", d.index, d.name,
                                   gib(d.memory_bytes), d.cc_major, d.cc_minor, d.multiprocessors));
      old_gpu |= d.cc_major < 8;
    }
    add("backend", old_gpu ? Level::kWarn : Level::kOk,
        fmt::format("CUDA backend: {} GPU(s); {}{}", b.gpus.size(), versions,
                    old_gpu ? "; kiln's CUDA kernels need compute capability 8.0 or newer" : ""))
        .details = listed;
  }

  void cuda() {
    const auto& g = r_.gpu;
    const std::string runtime =
        g.cuda_runtime.empty()
            ? "CUDA runtime not found (libcudart.so, /usr/local/cuda/version.json)"
            : fmt::format("CUDA runtime {} ({})", g.cuda_runtime, g.cuda_runtime_source);
    const std::string driver = g.cuda_driver.empty()
                                   ? "libcuda.so.1 not loadable"
                                   : fmt::format("driver supports CUDA {}", g.cuda_driver);
    const std::string compat =
        g.forward_compat ? fmt::format("; forward compatibility active ({})", g.libcuda_path) : "";
    Level level = Level::kOk;
    std::string why;
    if (!g.cuda_runtime.empty() && !g.cuda_driver.empty() &&
        version_less(g.cuda_driver, g.cuda_runtime)) {
      level = Level::kFail;
      why = fmt::format(
          ": the runtime needs a newer driver; upgrade it or put the CUDA {} compat "
          "libraries first on LD_LIBRARY_PATH (/usr/local/cuda/compat)",
          g.cuda_runtime);
    } else if (!g.compat_dirs.empty() && !g.forward_compat && !g.cuda_driver.empty()) {
      level = Level::kNote;
      why = fmt::format(
          "; LD_LIBRARY_PATH names {} but libcuda.so.1 loads from {}: forward "
          "compatibility is not in use",
          g.compat_dirs, g.libcuda_path);
    } else if (g.cuda_driver.empty() && !g.devices.empty()) {
      level = Level::kWarn;
    }
    add("cuda", level, fmt::format("{}; {}{}{}", runtime, driver, compat, why));
  }

  void efa() {
    const auto& e = r_.efa;
    if (e.devices.empty()) {
      add("efa", Level::kOk,
          e.other_rdma.empty()
              ? "no EFA devices"
              : fmt::format("no EFA devices; RDMA devices: {}", fmt::join(e.other_rdma, ", ")));
      return;
    }
    std::vector<std::string> missing;
    if (!e.libfabric_efa) missing.emplace_back("libfabric's efa provider (fi_info -p efa)");
    if (!e.ofi_plugin) missing.emplace_back("aws-ofi-nccl plugin (libnccl-net*.so)");
    if (r_.gpu.devices.empty()) missing.emplace_back("GPUs");
    const std::string have = fmt::format("{} EFA device(s) ({}), {} uverbs", e.devices.size(),
                                         fmt::join(e.devices, ", "), e.uverbs.size());
    if (missing.empty()) {
      add("efa", Level::kOk, have + "; libfabric efa provider and aws-ofi-nccl present");
    } else {
      add("efa", Level::kWarn,
          fmt::format("{}, but no {}: NCCL falls back to TCP sockets", have,
                      fmt::join(missing, ", no ")));
    }
  }

  void gloo() {
    const auto& g = r_.gloo;
    if (!g.ran) {
      add("gloo", Level::kNote, "group formation not checked");
    } else if (!g.ok) {
      add("gloo", Level::kFail, "cannot form a 2-rank Gloo group on this host: " + g.error);
    } else {
      add("gloo", Level::kOk,
          fmt::format("2-rank group over {}: all_reduce {} in {:.1f} ms, busbw {:.2f} GB/s",
                      transport_text(probed_transport(g)), size_text(g.bytes), g.seconds * 1e3,
                      g.busbw_gbps));
    }
  }
};

Requirement check_one(const DoctorReport& r, const std::string& text) {
  Requirement q{text, false, ""};
  const size_t ge = text.find(">=");
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    fail("--require '{}': expected KEY=VALUE or KEY>=VALUE (transport, gpus, cuda, device)", text);
  }
  const bool at_least = ge != std::string::npos && ge + 1 == eq;
  const std::string key = text.substr(0, at_least ? ge : eq);
  const std::string value = text.substr(eq + 1);
  if (key == "transport" && !at_least) {
    if (!is_named(kTransportKindNames, value)) {
      fail("--require '{}': unknown transport '{}' (one of {})", text, value,
           allowed_names(kTransportKindNames));
    }
    if (value == "gloo-tcp" || value == "loopback") {
      q.met = r.gloo.ok && transport_satisfies(probed_transport(r.gloo), value);
      q.reason = r.gloo.ok ? transport_text(probed_transport(r.gloo))
                           : (r.gloo.ran ? "Gloo group formation failed: " + r.gloo.error
                                         : "Gloo group formation was not checked");
    } else if (value == "socket") {
      q.met = !r.net.multi_node.empty();
      q.reason = q.met ? "TCP over " + r.net.multi_node : r.net.multi_node_error;
    } else {  // efa
      std::vector<std::string> missing;
      if (r.efa.devices.empty()) missing.emplace_back("no EFA device (/sys/class/infiniband)");
      if (!r.efa.libfabric_efa) missing.emplace_back("no libfabric efa provider (fi_info -p efa)");
      if (!r.efa.ofi_plugin) missing.emplace_back("no aws-ofi-nccl plugin (libnccl-net*.so)");
      if (r.gpu.devices.empty()) missing.emplace_back("no GPU");
      q.met = missing.empty();
      q.reason = q.met ? fmt::format("{} EFA device(s), libfabric efa, {}", r.efa.devices.size(),
                                     r.gpu.net_plugin)
                       : fmt::format("{}", fmt::join(missing, "; "));
    }
    return q;
  }
  if (key == "gpus") {
    int want = -1;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), want);
    if (ec != std::errc() || ptr != value.data() + value.size() || want < 0) {
      fail("--require '{}': gpus needs a count", text);
    }
    const int have = static_cast<int>(r.gpu.devices.size());
    q.met = at_least ? have >= want : have == want;
    q.reason = fmt::format("{} GPU(s) visible", have);
    return q;
  }
  if (key == "device" && !at_least) {
    if (value == "cpu") {
      q.met = true;
      q.reason = "the CPU backend is always built";
    } else if (value != "cuda") {
      fail("--require '{}': device is cpu or cuda", text);
    } else if (!r.cuda_backend) {
      q.reason = "this kiln was built without the CUDA backend";
    } else if (r.cuda_backend->gpus.empty()) {
      q.reason = fmt::format("no GPU visible ({})", r.cuda_backend->no_gpu_reason);
    } else {
      q.met = true;
      q.reason = fmt::format("{} GPU(s), first {}", r.cuda_backend->gpus.size(),
                             r.cuda_backend->gpus[0].name);
    }
    return q;
  }
  if (key == "cuda" && at_least) {
    if (value.find('.') == std::string::npos) {
      fail("--require '{}': cuda needs MAJOR.MINOR, e.g. cuda>=12.4", text);
    }
    if (r.gpu.cuda_driver.empty()) {
      q.reason = "no CUDA driver (libcuda.so.1 not loadable)";
    } else {
      q.met = !version_less(r.gpu.cuda_driver, value);
      q.reason = fmt::format("the driver supports CUDA {}{}", r.gpu.cuda_driver,
                             r.gpu.forward_compat ? " (forward compatibility)" : "");
    }
    return q;
  }
  fail(
      "--require '{}': unknown requirement (transport=efa|socket|gloo-tcp|loopback, gpus=N, "
      "gpus>=N, cuda>=X.Y, device=cpu|cuda)",
      text);
}

}  // namespace

const char* level_name(Level l) {
  switch (l) {
    case Level::kOk:
      return "ok";
    case Level::kNote:
      return "note";
    case Level::kWarn:
      return "warn";
    case Level::kFail:
      return "FAIL";
  }
  return "?";
}

bool DoctorReport::failed() const { return count(Level::kFail) > 0; }

int DoctorReport::count(Level l) const {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(),
                                        [l](const DoctorCheck& c) { return c.level == l; }));
}

DoctorReport run_doctor(const DoctorProbes& probes) {
  DoctorReport r = collect_facts(probes);
  Judge(r, probes).all();
  return r;
}

std::vector<Requirement> check_requirements(const DoctorReport& report,
                                            const std::vector<std::string>& requirements) {
  std::vector<Requirement> out;
  for (const auto& t : requirements) out.push_back(check_one(report, t));
  return out;
}

}  // namespace kiln
