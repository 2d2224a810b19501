// kiln doctor on crafted machines: a temporary root stands in for /proc, /sys, /dev, /etc, /usr
// and /opt; the environment, interfaces, commands and libraries are stubs. Each known mistake
// must produce its warning, and only then. The Gloo probe also runs for real on loopback.
#include "kiln/doctor/doctor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "kiln/base/error.h"
#include "kiln/comm/transport.h"
#if KILN_HAVE_CUDA
#include "kiln/kernels/cuda/cuda_devices.h"
#endif

namespace kiln {
namespace {

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

constexpr uint64_t kGiB = uint64_t{1} << 30;

// A CPU-only host with AVX-512, 64 GiB, a large /dev/shm, loopback and eth0: no warnings.
class Machine {
 public:
  explicit Machine(const std::string& name)
      : root_(fs::temp_directory_path() / ("kiln_doctor_" + name + std::to_string(::getpid()))) {
    fs::remove_all(root_);
    file("/proc/cpuinfo",
         "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n\n"
         "processor\t: 1\nmodel name\t: Test CPU\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n");
    file("/proc/meminfo", "MemTotal:       67108864 kB\nMemAvailable:   33554432 kB\n");
    p.root = root_;
    p.interfaces = [this] { return ifaces; };
    p.fs_space = [this](const fs::path& path) -> std::optional<FsSpace> {
      if (path != root_ / "dev/shm" || shm == 0) return std::nullopt;
      return FsSpace{shm, shm / 2};
    };
    p.run = [this](const std::string& cmd) -> std::optional<std::string> {
      for (const auto& [prefix, out] : commands) {
        if (cmd.find(prefix) != std::string::npos) return out;
      }
      return std::nullopt;
    };
    p.lib_version = [this](const std::string& lib,
                           const std::string&) -> std::optional<LibVersion> {
      auto it = libs.find(lib);
      if (it == libs.end()) return std::nullopt;
      return it->second;
    };
    p.blas_core = [this] { return blas; };
    p.gloo = [this](const std::string&) { return gloo; };
    gloo.ran = gloo.ok = true;
    gloo.transport = TransportInfo{.library = CommLibrary::kGloo,
                                   .net = std::string(kNetSocket),
                                   .iface = "lo",
                                   .address = "127.0.0.1"};
  }
  ~Machine() { fs::remove_all(root_); }

  void file(const std::string& path, const std::string& text) {
    const fs::path f = root_ / fs::path(path).relative_path();
    fs::create_directories(f.parent_path());
    write_file_atomic(f, text);
  }
  void dir(const std::string& path) {
    fs::create_directories(root_ / fs::path(path).relative_path());
  }
  void link(const std::string& path, const std::string& target) {
    const fs::path f = root_ / fs::path(path).relative_path();
    fs::create_directories(f.parent_path());
    fs::create_symlink(target, f);
  }
  // Eight H100s with driver 550, CUDA 12.4 runtime and driver, NCCL 2.21.5.
  void gpus(int n = 8) {
    file("/proc/driver/nvidia/version",
         "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC "
         "2024\n");
    for (int i = 0; i < n; ++i) {
      file(fmt::format("/proc/driver/nvidia/gpus/0000:{:02x}:00.0/information", 0x10 + i),
           fmt::format("Model: \t\t NVIDIA H100 80GB HBM3\nBus Location: \t 0000:{:02x}:00.0\n",
                       0x10 + i));
    }
    libs["libcudart.so"] = {12040, "/usr/local/cuda/lib64/libcudart.so.12"};
    libs["libcuda.so.1"] = {12040, "/usr/lib/x86_64-linux-gnu/libcuda.so.1"};
    libs["libnccl.so.2"] = {22105, "/usr/lib/x86_64-linux-gnu/libnccl.so.2"};
  }
  // EFA devices, libfabric's efa provider and the aws-ofi-nccl plugin.
  void efa() {
    link("/sys/class/infiniband/rdmap16s27/device/driver", "../../../bus/pci/drivers/efa");
    file("/dev/infiniband/uverbs0", "");
    commands.emplace_back("fi_info -p efa", "provider: efa\n");
    file("/opt/amazon/ofi-nccl/lib/libnccl-net.so", "");
    file("/etc/ld.so.conf.d/aws-ofi-nccl.conf", "/opt/amazon/ofi-nccl/lib\n");
  }

  DoctorReport report() { return run_doctor(p); }

  DoctorProbes p;
  std::vector<NetIface> ifaces = {{"lo", "127.0.0.1", true, true},
                                  {"eth0", "10.0.0.2", false, true}};
  uint64_t shm = 32 * kGiB;
  std::vector<std::pair<std::string, std::string>> commands;
  std::map<std::string, LibVersion> libs;
  std::string blas = "SkylakeX";
  GlooProbe gloo;

 private:
  fs::path root_;
};

std::vector<std::string> lines(const DoctorReport& r, Level level, const std::string& area = "") {
  std::vector<std::string> out;
  for (const auto& c : r.checks) {
    if (c.level == level && (area.empty() || c.area == area)) out.push_back(c.message);
  }
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

TEST(Doctor, CleanCpuHostSaysSoPlainly) {
  Machine m("clean");
  const DoctorReport r = m.report();
  EXPECT_FALSE(r.failed());
  EXPECT_EQ(r.count(Level::kWarn), 0) << doctor_text(r, {});
  EXPECT_EQ(r.cpu.model, "Test CPU");
  EXPECT_EQ(r.cpu.logical_cpus, 2);
  EXPECT_TRUE(r.cpu.avx512_bf16);
  EXPECT_FALSE(r.cpu.amx);
  EXPECT_EQ(r.memory.total, 64 * kGiB);
  EXPECT_EQ(r.net.multi_node, "eth0");
  EXPECT_EQ(r.net.single_node, "lo");
  const auto notes = lines(r, Level::kNote, "gpu");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "no NVIDIA GPU: driver not loaded (/proc/driver/nvidia/version missing); checking the "
            "CPU path");
  const std::string text = doctor_text(r, {});
  EXPECT_HAS(text, "ok    blas    OpenBLAS core SkylakeX\n");
  EXPECT_HAS(text, "ok    net     multi-node: eth0 10.0.0.2; one node: lo 127.0.0.1\n");
  EXPECT_HAS(text, "doctor: ok (0 failure(s), 0 warning(s))\n");
}

TEST(Doctor, LoopbackInInterfaceLists) {
  Machine m("lo");
  m.p.env = {{"NCCL_SOCKET_IFNAME", "eth0,lo"}, {"GLOO_SOCKET_IFNAME", "^docker"}};
  auto warns = joined(lines(m.report(), Level::kWarn, "env"));
  EXPECT_HAS(warns,
             "NCCL_SOCKET_IFNAME=eth0,lo lets in loopback lo: peers on other hosts cannot "
             "reach it");
  EXPECT_HAS(warns, "GLOO_SOCKET_IFNAME=^docker lets in loopback lo");
  EXPECT_HAS(warns, "add lo to the list");

  // Exclusions that name lo, and kiln's own exclude lists, are fine.
  m.p.env = {{"NCCL_SOCKET_IFNAME", "^docker,lo"}, {"KILN_SOCKET_IFNAME", "^docker"}};
  EXPECT_TRUE(lines(m.report(), Level::kWarn).empty());

  // KILN_SOCKET_IFNAME=lo: kiln cannot join other hosts at all.
  m.p.env = {{"KILN_SOCKET_IFNAME", "lo"}};
  const DoctorReport r = m.report();
  EXPECT_HAS(joined(lines(r, Level::kWarn, "env")), "KILN_SOCKET_IFNAME=lo lets in loopback lo");
  EXPECT_HAS(
      joined(lines(r, Level::kWarn, "net")),
      "this host cannot join a multi-node job: KILN_SOCKET_IFNAME 'lo' matches only loopback");
  EXPECT_EQ(r.net.single_node, "lo");
}

TEST(Doctor, EfaSettingsWithoutEfa) {
  Machine m("noefa");
  m.p.env = {{"FI_PROVIDER", "efa"}, {"FI_EFA_USE_DEVICE_RDMA", "1"}, {"FI_EFA_FORK_SAFE", "1"}};
  auto warns = joined(lines(m.report(), Level::kWarn, "env"));
  EXPECT_HAS(warns, "FI_PROVIDER=efa but this host has no EFA device");
  EXPECT_HAS(warns, "FI_EFA_FORK_SAFE, FI_EFA_USE_DEVICE_RDMA set but this host has no EFA device");
  // On an EFA host the same settings are right.
  m.efa();
  m.gpus();
  const DoctorReport r = m.report();
  EXPECT_TRUE(lines(r, Level::kWarn).empty()) << doctor_text(r, {});
  EXPECT_EQ(r.efa.devices, std::vector<std::string>{"rdmap16s27"});
  EXPECT_EQ(r.efa.uverbs, std::vector<std::string>{"uverbs0"});
  EXPECT_TRUE(r.efa.libfabric_efa);
  EXPECT_EQ(r.gpu.net_plugin, "/opt/amazon/ofi-nccl/lib/libnccl-net.so");
}

TEST(Doctor, EfaDevicesWithoutThePlugin) {
  Machine m("efanoplugin");
  m.gpus();
  m.link("/sys/class/infiniband/efa_0/device/driver", "../../drivers/efa");
  m.commands.emplace_back("fi_info -p efa", "provider: efa\n");
  EXPECT_HAS(joined(lines(m.report(), Level::kWarn, "efa")),
             "1 EFA device(s) (efa_0), 0 uverbs, but no aws-ofi-nccl plugin (libnccl-net*.so): "
             "NCCL falls back to TCP sockets");
}

TEST(Doctor, MissingPluginsAndLibraryDirs) {
  Machine m("plugin");
  m.p.env = {{"NCCL_NET_PLUGIN", "/opt/nope/libnccl-net.so"},
             {"LD_LIBRARY_PATH", "/opt/aws-ofi-nccl/lib:/usr/local/cuda/compat:/somewhere/else"}};
  auto warns = joined(lines(m.report(), Level::kWarn, "env"));
  EXPECT_HAS(warns, "NCCL_NET_PLUGIN=/opt/nope/libnccl-net.so: not found");
  EXPECT_HAS(warns,
             "LD_LIBRARY_PATH names /opt/aws-ofi-nccl/lib, which does not exist: the "
             "aws-ofi-nccl plugin will not load from it");
  EXPECT_HAS(warns, "LD_LIBRARY_PATH names /usr/local/cuda/compat, which does not exist");
  EXPECT_EQ(warns.find("/somewhere/else"), std::string::npos) << warns;  // not NCCL's business

  // A plugin by name, found on LD_LIBRARY_PATH: libnccl-net-NAME.so.
  m.file("/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so", "");
  m.p.env = {{"NCCL_NET_PLUGIN", "ofi"}, {"LD_LIBRARY_PATH", "/opt/aws-ofi-nccl/lib"}};
  DoctorReport r = m.report();
  EXPECT_TRUE(lines(r, Level::kWarn).empty()) << doctor_text(r, {});
  EXPECT_EQ(r.gpu.net_plugin, "/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so");
  EXPECT_TRUE(r.efa.ofi_plugin);
  m.p.env = {{"NCCL_NET_PLUGIN", "aws-ofi"}};
  EXPECT_HAS(joined(lines(m.report(), Level::kWarn, "env")),
             "NCCL_NET_PLUGIN=aws-ofi: not found (looked for libnccl-net-aws-ofi.so, aws-ofi");
}

TEST(Doctor, DisabledNcclTransportsAreNoted) {
  Machine m("disabled");
  m.p.env = {{"NCCL_P2P_DISABLE", "1"}, {"NCCL_IB_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "0"}};
  const DoctorReport r = m.report();
  auto notes = joined(lines(r, Level::kNote, "env"));
  EXPECT_HAS(notes, "NCCL_P2P_DISABLE=1: GPUs of a node exchange data through host memory");
  EXPECT_HAS(notes, "NCCL_IB_DISABLE=1: NCCL will not use InfiniBand/RoCE verbs");
  EXPECT_EQ(notes.find("NCCL_SHM_DISABLE"), std::string::npos);
  // Every relevant variable is listed; secrets are not shown.
  m.p.env = {{"NCCL_DEBUG", "INFO"}, {"KILN_STORE_TOKEN", "s3cret"}, {"HOME", "/root"}};
  const DoctorReport l = m.report();
  const std::vector<std::pair<std::string, std::string>> want = {{"KILN_STORE_TOKEN", "<set>"},
                                                                 {"NCCL_DEBUG", "INFO"}};
  EXPECT_EQ(l.env, want);
}

TEST(Doctor, SharedMemory) {
  Machine m("shm");
  m.shm = 64 << 20;  // Docker's default
  EXPECT_HAS(joined(lines(m.report(), Level::kWarn, "shm")),
             "/dev/shm is 64 MiB (< 1 GiB): NCCL between GPUs of a node fails with 'Bus error'");
  m.shm = 0;
  EXPECT_HAS(joined(lines(m.report(), Level::kWarn, "shm")), "/dev/shm is missing");
}

TEST(Doctor, GpusDriverAndCuda) {
  Machine m("gpu");
  m.gpus(2);
  m.commands.emplace_back("nvidia-smi",
                          "NVIDIA H100 80GB HBM3, 00000000:10:00.0, 81559 MiB\n"
                          "NVIDIA H100 80GB HBM3, 00000000:11:00.0, 81559 MiB\n");
  DoctorReport r = m.report();
  EXPECT_FALSE(r.failed()) << doctor_text(r, {});
  EXPECT_EQ(r.gpu.driver_version, "550.54.15");
  ASSERT_EQ(r.gpu.devices.size(), 2u);
  EXPECT_EQ(r.gpu.devices[1].model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r.gpu.devices[1].bus, "0000:11:00.0");
  EXPECT_EQ(r.gpu.devices[1].memory, "81559 MiB");
  EXPECT_EQ(r.gpu.cuda_runtime, "12.4");
  EXPECT_EQ(r.gpu.nccl_version, "2.21.5");
  EXPECT_HAS(joined(lines(r, Level::kOk, "gpu")), "driver 550.54.15, 2 GPU(s)");

  // A runtime newer than the driver supports fails, naming the fix.
  m.libs["libcuda.so.1"] = {12020, "/usr/lib/x86_64-linux-gnu/libcuda.so.1"};
  r = m.report();
  EXPECT_HAS(
      joined(lines(r, Level::kFail, "cuda")),
      "CUDA runtime 12.4 (/usr/local/cuda/lib64/libcudart.so.12); driver supports CUDA 12.2: "
      "the runtime needs a newer driver");
  // Forward compatibility: libcuda from cuda/compat reports the newer version.
  m.p.env = {{"LD_LIBRARY_PATH", "/usr/local/cuda-12.4/compat"}};
  m.libs["libcuda.so.1"] = {12040, "/usr/local/cuda-12.4/compat/libcuda.so.1"};
  r = m.report();
  EXPECT_FALSE(r.failed());
  EXPECT_TRUE(r.gpu.forward_compat);
  EXPECT_HAS(joined(lines(r, Level::kOk, "cuda")), "forward compatibility active");
  // Compat configured, but the system libcuda wins (the compat directory is missing).
  m.libs["libcuda.so.1"] = {12040, "/usr/lib/x86_64-linux-gnu/libcuda.so.1"};
  EXPECT_HAS(joined(lines(m.report(), Level::kNote, "cuda")),
             "LD_LIBRARY_PATH names /usr/local/cuda-12.4/compat but libcuda.so.1 loads from "
             "/usr/lib/x86_64-linux-gnu/libcuda.so.1");

  // No runtime library: version.json of the toolkit.
  m.libs.erase("libcudart.so");
  m.file("/usr/local/cuda/version.json", R"({"cuda": {"name": "CUDA SDK", "version": "12.6.2"}})");
  r = m.report();
  EXPECT_EQ(r.gpu.cuda_runtime, "12.6");
  EXPECT_EQ(r.gpu.cuda_runtime_source, "/usr/local/cuda/version.json");
}

TEST(Doctor, DriverWithoutVisibleGpus) {
  Machine m("nodev");
  m.file("/proc/driver/nvidia/version",
         "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
         "535.104.05  Release Build\n");
  const DoctorReport r = m.report();
  EXPECT_EQ(r.gpu.driver_version, "535.104.05");
  EXPECT_HAS(joined(lines(r, Level::kWarn, "gpu")),
             "NVIDIA driver 535.104.05 loaded but no GPU visible");
}

// What a CUDA build reports on this machine without a driver (static cudart answers anyway).
CudaBackendProbe no_gpu_backend() {
  CudaBackendProbe b;
  b.no_gpu_reason = "no NVIDIA driver (libcuda.so.1 not found)";
  b.runtime_version = 13000;
  b.cublaslt_version = 130100;
  b.nccl_version = 22803;
  return b;
}

TEST(Doctor, CpuOnlyBuildSaysSo) {
  Machine m("cpubuild");
  const DoctorReport r = m.report();
  EXPECT_FALSE(r.cuda_backend.has_value());
  EXPECT_EQ(joined(lines(r, Level::kNote, "backend")),
            "CPU only: this kiln was built without the CUDA backend\n");
  const auto reqs = check_requirements(r, {"device=cuda", "device=cpu"});
  EXPECT_FALSE(reqs[0].met);
  EXPECT_EQ(reqs[0].reason, "this kiln was built without the CUDA backend");
  EXPECT_TRUE(reqs[1].met);
  EXPECT_TRUE(parse_json(doctor_json(r, {}).dump(), "doctor").at("cuda_backend").is_null());
}

TEST(Doctor, CudaBackendWithoutGpuIsANoteNotAFailure) {
  Machine m("cudanogpu");
  m.p.cuda_backend = [] { return std::optional(no_gpu_backend()); };
  const DoctorReport r = m.report();
  EXPECT_FALSE(r.failed()) << doctor_text(r, {});
  EXPECT_EQ(r.count(Level::kWarn), 0) << doctor_text(r, {});
  EXPECT_EQ(joined(lines(r, Level::kNote, "backend")),
            "CUDA backend: no GPU visible (no NVIDIA driver (libcuda.so.1 not found)); "
            "train.device=auto runs on the CPU; driver none, runtime CUDA 13.0, cuBLASLt 130100, "
            "NCCL 2.28.3\n");
  EXPECT_HAS(doctor_text(r, {}), "note  backend CUDA backend: no GPU visible (");
  // Asking for CUDA is what makes it a failure.
  const auto reqs = check_requirements(r, {"device=cuda"});
  EXPECT_FALSE(reqs[0].met);
  EXPECT_EQ(reqs[0].reason, "no GPU visible (no NVIDIA driver (libcuda.so.1 not found))");
  EXPECT_HAS(doctor_text(r, reqs), "FAIL  require device=cuda: no GPU visible (");
  EXPECT_THROW(check_requirements(r, {"device=tpu"}), Error);
  // A loaded driver whose GPUs the backend cannot see is worth a warning.
  m.file("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.1\n");
  EXPECT_EQ(lines(m.report(), Level::kWarn, "backend").size(), 1u);
}

TEST(Doctor, CudaBackendListsGpusAndVersions) {
  Machine m("cudagpu");
  m.gpus(1);
  CudaBackendProbe b = no_gpu_backend();
  b.no_gpu_reason.clear();
  b.driver_version = 13000;
  b.gpus = {{0, "NVIDIA H200", 140 * kGiB, 9, 0, 132}};
  m.p.cuda_backend = [&b] { return std::optional(b); };
  DoctorReport r = m.report();
  EXPECT_FALSE(r.failed()) << doctor_text(r, {});
  const auto ok = lines(r, Level::kOk, "backend");
  ASSERT_EQ(ok.size(), 1u) << doctor_text(r, {});
  EXPECT_EQ(ok[0],
            "CUDA backend: 1 GPU(s); driver CUDA 13.0, runtime CUDA 13.0, cuBLASLt 130100, NCCL "
            "2.28.3");
  EXPECT_HAS(doctor_text(r, {}), "0 NVIDIA H200, 140.0 GiB, compute capability 9.0, 132 SMs\n");
  const auto reqs = check_requirements(r, {"device=cuda"});
  EXPECT_TRUE(reqs[0].met) << reqs[0].reason;
  const Json j = parse_json(doctor_json(r, reqs).dump(), "doctor");
  EXPECT_EQ(j.at("cuda_backend").at("devices").at(0).at("compute_capability"), "9.0");
  EXPECT_EQ(j.at("cuda_backend").at("nccl_version"), 22803);
  // A pre-Ampere GPU: the kernels are built for sm_80 and newer.
  b.gpus[0].cc_major = 7;
  EXPECT_HAS(joined(lines(m.report(), Level::kWarn, "backend")),
             "kiln's CUDA kernels need compute capability 8.0 or newer");
}

TEST(Doctor, NcclNetPluginsOnTheLoaderPath) {
  Machine m("plugins");
  m.gpus(1);
  m.file("/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "");
  m.file("/opt/amazon/ofi-nccl/lib/libnccl-net.so", "");
  m.p.env = {{"LD_LIBRARY_PATH", "/opt/amazon/ofi-nccl/lib"}, {"NCCL_NET_PLUGIN", "ofi"}};
  const DoctorReport r = m.report();
  EXPECT_EQ(r.gpu.net_plugins_found,
            (std::vector<std::string>{"/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",
                                      "/opt/amazon/ofi-nccl/lib/libnccl-net.so"}));
  EXPECT_EQ(r.gpu.net_plugin, "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
  const std::string text = doctor_text(r, {});
  EXPECT_HAS(text, "NCCL_NET_PLUGIN: ofi\n");
  EXPECT_HAS(text, "found /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so\n");
}

TEST(Doctor, ProbeCudaVerdict) {
  EXPECT_FALSE(cuda_probe_verdict(std::nullopt).ok);
  EXPECT_EQ(cuda_probe_verdict(std::nullopt).line, "this kiln was built without the CUDA backend");
  CudaBackendProbe b = no_gpu_backend();
  CudaProbeVerdict v = cuda_probe_verdict(b);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.line, "no GPU visible (no NVIDIA driver (libcuda.so.1 not found))");
  b.no_gpu_reason.clear();
  b.driver_version = 13000;
  b.gpus = {{0, "NVIDIA H200", 140 * kGiB, 9, 0, 132}, {1, "NVIDIA H200", 140 * kGiB, 9, 0, 132}};
  v = cuda_probe_verdict(b);
  EXPECT_TRUE(v.ok);
  EXPECT_EQ(v.line, "2 GPU(s): NVIDIA H200; driver CUDA 13.0, runtime CUDA 13.0");
}

// This binary's own CUDA backend, for real: in CI (a CUDA build, no driver) it must answer with
// the versions it links and name why there is no GPU; on a GPU machine it lists the GPUs.
TEST(Doctor, RealCudaBackendProbe) {
  const std::optional<CudaBackendProbe> b = probe_cuda_backend();
#if KILN_HAVE_CUDA
  ASSERT_TRUE(b.has_value());
  EXPECT_GE(b->runtime_version, 12000);
  EXPECT_GT(b->cublaslt_version, 0u);
  EXPECT_GE(b->nccl_version, 20000);
  DoctorProbes p;
  p.root = fs::temp_directory_path() / "kiln_doctor_real_cuda_empty_root";
  p.cuda_backend = probe_cuda_backend;
  const DoctorReport r = run_doctor(p);
  if (b->gpus.empty()) {
    EXPECT_FALSE(b->no_gpu_reason.empty());
    // Without the driver's library the runtime's "CUDA driver version is insufficient" would
    // mislead: the reason says there is no driver.
    if (!driver_library_loads()) {
      EXPECT_EQ(b->no_gpu_reason, "no NVIDIA driver (libcuda.so.1 not found)");
    }
    EXPECT_HAS(joined(lines(r, Level::kNote, "backend")),
               "CUDA backend: no GPU visible (" + b->no_gpu_reason + ")");
  } else {
    EXPECT_TRUE(b->no_gpu_reason.empty()) << b->no_gpu_reason;
    EXPECT_FALSE(b->gpus[0].name.empty());
    EXPECT_GT(b->gpus[0].memory_bytes, 0u);
    EXPECT_EQ(lines(r, Level::kOk, "backend").size(), 1u) << doctor_text(r, {});
  }
#else
  EXPECT_FALSE(b.has_value());
#endif
}

TEST(Doctor, NotesKilnsCpuCap) {
  Machine m("cap");
  EXPECT_TRUE(lines(m.report(), Level::kNote, "cpu").empty());
  m.p.env = {{"KILN_CPU_ISA", "avx2"}};
  EXPECT_HAS(joined(lines(m.report(), Level::kNote, "cpu")),
             "KILN_CPU_ISA=avx2: kiln uses no CPU feature above avx2 (this CPU: avx512");
  // A cap at or above the CPU is no cap; a value kiln does not know fails, as every command does.
  m.p.env = {{"KILN_CPU_ISA", "amx"}};
  EXPECT_TRUE(lines(m.report(), Level::kNote, "cpu").empty());
  m.p.env = {{"KILN_CPU_ISA", "AVX2"}};
  EXPECT_HAS(joined(lines(m.report(), Level::kFail, "cpu")), "KILN_CPU_ISA='AVX2' is not");
}

TEST(Doctor, GenericBlasCore) {
  Machine m("blas");
  m.blas = "Prescott";
  DoctorReport r = m.report();
  EXPECT_TRUE(r.failed());
  EXPECT_HAS(joined(lines(r, Level::kFail, "blas")),
             "OpenBLAS runs generic 'Prescott' kernels on a CPU with AVX-512");
  m.p.env = {{"OPENBLAS_CORETYPE", "Prescott"}};
  EXPECT_HAS(joined(lines(m.report(), Level::kFail, "blas")), "unset OPENBLAS_CORETYPE=Prescott");
  // A CPU without AVX2 has nothing better: noted, not failed.
  m.file("/proc/cpuinfo", "processor\t: 0\nmodel name\t: Old CPU\nflags\t\t: fpu sse sse3\n");
  r = m.report();
  EXPECT_FALSE(r.failed());
  EXPECT_HAS(joined(lines(r, Level::kWarn, "cpu")), "no AVX2");
}

TEST(Doctor, GlooFailureFails) {
  Machine m("gloo");
  m.gloo = GlooProbe{};
  m.gloo.ran = true;
  m.gloo.error = "rank 0: no usable network interface";
  const DoctorReport r = m.report();
  EXPECT_TRUE(r.failed());
  EXPECT_HAS(joined(lines(r, Level::kFail, "gloo")),
             "cannot form a 2-rank Gloo group on this host: rank 0: no usable network interface");
}

Requirement require(const DoctorReport& r, const std::string& text) {
  return check_requirements(r, {text}).at(0);
}

TEST(Doctor, Requirements) {
  Machine m("req");
  DoctorReport r = m.report();
  EXPECT_TRUE(require(r, "transport=gloo-tcp").met);
  EXPECT_EQ(require(r, "transport=gloo-tcp").reason, "gloo-tcp lo 127.0.0.1");
  EXPECT_TRUE(require(r, "transport=loopback").met);
  EXPECT_TRUE(require(r, "transport=socket").met);
  EXPECT_TRUE(require(r, "gpus=0").met);
  EXPECT_FALSE(require(r, "gpus>=1").met);
  const Requirement efa = require(r, "transport=efa");
  EXPECT_FALSE(efa.met);
  EXPECT_EQ(efa.reason,
            "no EFA device (/sys/class/infiniband); no libfabric efa provider (fi_info -p efa); no "
            "aws-ofi-nccl plugin (libnccl-net*.so); no GPU");
  EXPECT_FALSE(require(r, "cuda>=12.4").met);

  // Only loopback: no socket transport to other hosts.
  m.ifaces = {{"lo", "127.0.0.1", true, true}};
  EXPECT_FALSE(require(m.report(), "transport=socket").met);
  // A probe over a NIC (KILN_SOCKET_IFNAME set): authenticated Gloo over TCP, not loopback.
  m.gloo.transport->iface = "eth0";
  m.gloo.transport->address = "10.0.0.2";
  m.gloo.transport->authenticated = true;
  EXPECT_TRUE(require(m.report(), "transport=gloo-tcp").met);
  const Requirement lo = require(m.report(), "transport=loopback");
  EXPECT_FALSE(lo.met);
  EXPECT_EQ(lo.reason, "gloo-tcp+auth eth0 10.0.0.2");
  // Gloo that could not form a group.
  m.gloo.ok = false;
  m.gloo.error = "boom";
  EXPECT_EQ(require(m.report(), "transport=gloo-tcp").reason, "Gloo group formation failed: boom");

  Machine full("reqfull");
  full.gpus(8);
  full.efa();
  r = full.report();
  EXPECT_TRUE(require(r, "transport=efa").met) << require(r, "transport=efa").reason;
  EXPECT_TRUE(require(r, "gpus=8").met);
  EXPECT_FALSE(require(r, "gpus=4").met);
  EXPECT_TRUE(require(r, "gpus>=4").met);
  EXPECT_TRUE(require(r, "cuda>=12.4").met);
  EXPECT_TRUE(require(r, "cuda>=11.8").met);
  EXPECT_FALSE(require(r, "cuda>=12.6").met);
  EXPECT_HAS(doctor_text(r, check_requirements(r, {"gpus=4"})),
             "FAIL  require gpus=4: 8 GPU(s) visible\ndoctor: FAIL (1 failure(s), 0 warning(s))");

  for (const char* bad : {"transport", "transport=ib", "gpus=x", "gpus=-1", "cuda>=12", "cuda=12.4",
                          "color=red", "=efa"}) {
    EXPECT_THROW(check_requirements(r, {bad}), Error) << bad;
  }
}

TEST(Doctor, JsonIsOneParsableObject) {
  Machine m("json");
  m.gpus(1);
  m.p.env = {{"FI_PROVIDER", "efa"}};
  const DoctorReport r = m.report();
  const auto reqs = check_requirements(r, {"transport=efa"});
  const Json j = parse_json(doctor_json(r, reqs).dump(), "doctor json");
  EXPECT_FALSE(j.at("ok").get<bool>());
  EXPECT_EQ(j.at("warnings").get<int>(), r.count(Level::kWarn));
  EXPECT_EQ(j.at("cpu").at("logical_cpus"), 2);
  EXPECT_EQ(j.at("gpu").at("devices").size(), 1u);
  EXPECT_EQ(j.at("gpu").at("nccl_version"), "2.21.5");
  EXPECT_EQ(j.at("network").at("multi_node_interface"), "eth0");
  EXPECT_EQ(j.at("env").at("FI_PROVIDER"), "efa");
  EXPECT_EQ(j.at("requirements").at(0).at("met"), false);
  EXPECT_EQ(j.at("checks").size(), r.checks.size());
  EXPECT_EQ(j.at("gloo").at("transport"), "gloo-tcp lo 127.0.0.1");
  EXPECT_EQ(j.at("gloo").at("transport_info").at("iface"), "lo");
  EXPECT_EQ(j.at("gloo").at("transport_info").at("library"), "gloo");
}

// The real thing: two threads form a Gloo group over loopback and all-reduce.
TEST(Doctor, RealGlooProbe) {
  const GlooProbe g = probe_gloo_loopback("", 1 << 20);
  ASSERT_TRUE(g.ok) << g.error;
  ASSERT_TRUE(g.transport.has_value());
  EXPECT_TRUE(transport_text(*g.transport).starts_with("gloo-tcp lo 127."))
      << transport_text(*g.transport);
  EXPECT_TRUE(transport_satisfies(*g.transport, TransportKind::kLoopback));
  EXPECT_FALSE(g.transport->shm_lane);  // the probe measures TCP
  EXPECT_GT(g.busbw_gbps, 0);
  const GlooProbe bad = probe_gloo_loopback("nosuchif0", 1024);
  EXPECT_FALSE(bad.ok);
  EXPECT_HAS(bad.error, "KILN_SOCKET_IFNAME 'nosuchif0' matches no interface");
}

}  // namespace
}  // namespace kiln
