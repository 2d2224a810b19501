// kiln doctor: what this machine offers a kiln job, and the known mistakes that make one fail
// or crawl (loopback chosen for a multi-node job, EFA settings without EFA, a network plugin
// that is not there, a CUDA runtime newer than the driver, BLAS on generic kernels, ...).
//
// Everything it reads from the outside world goes through DoctorProbes, so tests build crafted
// machines: an environment, a root directory standing in for procfs/sysfs//dev//usr, a command
// runner and a library loader. system_probes() is the real machine.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/comm/net_iface.h"
#include "kiln/comm/transport_info.h"
#include "kiln/kernels/device/gpu_inventory.h"

namespace kiln {

// A library's version as its `int f(int*)` entry point returns it (cudaRuntimeGetVersion,
// cuDriverGetVersion, ncclGetVersion), and the path the loader resolved it to.
struct LibVersion {
  int version = 0;
  std::string path;
};

// Total and free bytes of a filesystem (statvfs).
struct FsSpace {
  uint64_t total = 0, free = 0;
};

// A 2-rank Gloo group formed on this host (threads over an in-memory store): does group
// formation work, over which transport, and how fast is one all-reduce.
struct GlooProbe {
  bool ran = false, ok = false;
  std::optional<TransportInfo> transport;  // rank 0's, once its group formed (set when ok)
  std::string error;                       // when !ok
  uint64_t bytes = 0;                      // all-reduce size
  double seconds = 0;                      // median time of one all-reduce
  double busbw_gbps = 0;  // nccl-tests' bus bandwidth: bytes / seconds * 2(n-1)/n, n = 2
};

// Forms the group (interface spec `ifname`, KILN_SOCKET_IFNAME syntax), all-reduces `bytes` of
// f32 `iters` times after one warm-up, and checks the sums. Over the transport a run on that
// path would use: an interface named is a multi-node path, so its pairs authenticate
// (gloo-tcp+auth, dist.authenticate_pairs auto); "" (loopback) keeps Gloo's tcp. Never throws.
GlooProbe probe_gloo_loopback(const std::string& ifname, uint64_t bytes, int iters = 3);

// What kiln's CUDA backend sees, asked of the libraries it was linked with (static cudart,
// cuBLASLt, NCCL), not of whatever libraries sit on the loader path. Versions are the raw
// integers (CUDA: 1000 * major + 10 * minor; NCCL: 10000 * major + 100 * minor + patch).
struct CudaBackendProbe {
  std::vector<VisibleGpu> gpus;
  std::string no_gpu_reason;  // why `gpus` is empty (cuda_devices().reason)
  int driver_version = 0;     // cudaDriverGetVersion: 0 without a driver
  int runtime_version = 0;    // cudaRuntimeGetVersion
  uint64_t cublaslt_version = 0;
  int nccl_version = 0;  // ncclGetVersion; 0 when it failed
};

// The real CUDA backend probe: nullopt in a build without the CUDA backend. Never throws.
std::optional<CudaBackendProbe> probe_cuda_backend();

struct DoctorProbes {
  std::map<std::string, std::string> env;  // the process environment
  fs::path root = "/";                     // prefix for /proc, /sys, /dev, /etc, /usr, /opt
  std::function<std::vector<NetIface>()> interfaces;
  std::function<std::optional<FsSpace>(const fs::path&)> fs_space;  // nullopt: no such path
  // Runs a shell command: its stdout, or nullopt when it is missing or exits non-zero.
  std::function<std::optional<std::string>(const std::string&)> run;
  // dlopen(library) and call `int symbol(int*)`; nullopt when either is missing or it fails.
  std::function<std::optional<LibVersion>(const std::string& library, const std::string& symbol)>
      lib_version;
  std::function<std::string()> blas_core;  // the OpenBLAS core in use ("SkylakeX", ...)
  // Runs the Gloo probe with this interface spec; empty: skipped (reported as not run).
  std::function<GlooProbe(const std::string& ifname)> gloo;
  // The linked CUDA backend; unset or nullopt: this build has none (a CPU-only kiln).
  std::function<std::optional<CudaBackendProbe>()> cuda_backend;
};

// The real machine; the Gloo probe all-reduces `gloo_bytes`.
DoctorProbes system_probes(uint64_t gloo_bytes = uint64_t{64} << 20);

enum class Level { kOk, kNote, kWarn, kFail };
const char* level_name(Level l);  // "ok", "note", "warn", "FAIL"

// One line of the report: a finding about one area ("cpu", "net", "env", "gpu", ...).
struct DoctorCheck {
  std::string area;
  Level level = Level::kOk;
  std::string message;
  std::vector<std::string> details;  // indented lines under it (environment variables, GPUs)
};

struct GpuDevice {
  std::string model;   // "NVIDIA H100 80GB HBM3"
  std::string bus;     // "0000:53:00.0"
  std::string memory;  // "81559 MiB" (nvidia-smi), or ""
};

struct DoctorReport {
  struct Cpu {
    std::string model;
    int logical_cpus = 0;
    bool avx2 = false, avx512f = false, avx512_bf16 = false, amx = false;
    std::string blas_core;
  } cpu;
  struct Memory {
    uint64_t total = 0, available = 0;  // bytes, /proc/meminfo
    std::optional<FsSpace> shm;         // /dev/shm
  } memory;
  struct Net {
    std::vector<NetIface> interfaces;
    std::string ifname_spec;       // KILN_SOCKET_IFNAME
    std::string multi_node;        // what kiln binds when peers are on other hosts, or ""
    std::string multi_node_error;  // why nothing fits, when multi_node is ""
    std::string single_node;       // what it binds when every peer is on this host, or ""
  } net;
  std::vector<std::pair<std::string, std::string>> env;  // NCCL_*, FI_*, KILN_*, ... (masked)
  struct Gpu {
    bool driver_loaded = false;
    std::string driver_version;
    std::vector<GpuDevice> devices;
    std::string cuda_runtime;         // "12.4", or ""
    std::string cuda_runtime_source;  // the libcudart path, or the version.json read
    std::string cuda_driver;          // the newest CUDA the loaded libcuda supports, or ""
    std::string libcuda_path;
    bool forward_compat = false;  // libcuda comes from a cuda/compat directory
    std::string compat_dirs;      // LD_LIBRARY_PATH entries naming cuda/compat
    std::string nccl_version, nccl_path;
    std::string net_plugin;                      // the libnccl-net*.so NCCL would load, or ""
    std::string net_plugin_wanted;               // NCCL_NET_PLUGIN, or "libnccl-net.so" by default
    std::vector<std::string> net_plugins_found;  // every libnccl-net*.so on the loader path
  } gpu;
  std::optional<CudaBackendProbe> cuda_backend;  // nullopt: built without the CUDA backend
  struct Efa {
    std::vector<std::string> devices;     // /sys/class/infiniband entries driven by efa
    std::vector<std::string> uverbs;      // /dev/infiniband/uverbs*
    std::vector<std::string> other_rdma;  // InfiniBand/RoCE devices that are not EFA
    bool libfabric_efa = false;           // fi_info -p efa succeeds
    bool ofi_plugin = false;              // the NCCL net plugin is aws-ofi-nccl
  } efa;
  GlooProbe gloo;
  std::vector<DoctorCheck> checks;  // in display order

  bool failed() const;
  int count(Level l) const;
};

// Reads everything and judges it.
DoctorReport run_doctor(const DoctorProbes& probes);

// Requirements "KEY=VALUE" / "KEY>=VALUE": transport=efa|socket|gloo-tcp|loopback, gpus=N
// (exactly), gpus>=N, cuda>=X.Y (the driver runs CUDA X.Y, forward compatibility counted),
// device=cuda (this kiln has the CUDA backend and it sees a GPU) or device=cpu (always met).
// Returns one reason per unmet requirement. Throws kiln::Error for a malformed one.
struct Requirement {
  std::string text;
  bool met = false;
  std::string reason;  // why not, or what satisfied it
};
std::vector<Requirement> check_requirements(const DoctorReport& report,
                                            const std::vector<std::string>& requirements);

// kiln doctor --probe-cuda (deploy/entrypoint.sh's forward-compatibility probe): whether the
// CUDA backend initialised the driver the loader found and sees a GPU, and one line saying so
// ("N GPU(s): NAME; driver CUDA X.Y, runtime CUDA X.Y") or why not.
struct CudaProbeVerdict {
  bool ok = false;
  std::string line;
};
CudaProbeVerdict cuda_probe_verdict(const std::optional<CudaBackendProbe>& backend);

// The report as one JSON object; the human form: aligned "ok/note/warn/FAIL area message" lines.
Json doctor_json(const DoctorReport& report, const std::vector<Requirement>& requirements);
std::string doctor_text(const DoctorReport& report, const std::vector<Requirement>& requirements);

}  // namespace kiln
