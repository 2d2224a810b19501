// kiln doctor, part 1: the facts. Reads the machine through DoctorProbes (doctor.h) and fills a
// DoctorReport without judging it (doctor_checks.cc judges).
#include <dlfcn.h>
#include <link.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "kiln/base/error.h"
#include "kiln/base/random_token.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/doctor/doctor.h"
#include "kiln/doctor/doctor_facts.h"
#include "kiln/kernels/device/host_cpu.h"

extern char** environ;

namespace kiln {

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return "";
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

// "key : value" lines (cpuinfo, meminfo, the driver's per-GPU information) as (key, value).
std::vector<std::pair<std::string, std::string>> key_values(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    out.emplace_back(trim(line.substr(0, colon)), trim(line.substr(colon + 1)));
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<std::string> sorted_entries(const fs::path& dir, const std::string& prefix = "") {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(prefix)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void read_cpu(const DoctorProbes& p, DoctorReport& r) {
  std::vector<std::string> flags;
  for (const auto& [k, v] : key_values(read_text(host_path(p.root, "/proc/cpuinfo")))) {
    if (k == "processor") ++r.cpu.logical_cpus;
    if (k == "model name" && r.cpu.model.empty()) r.cpu.model = v;
    if (k == "flags" && flags.empty()) flags = split(v, ' ');
  }
  auto has = [&](const char* f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
  r.cpu.avx2 = has("avx2");
  r.cpu.avx512f = has("avx512f");
  r.cpu.avx512_bf16 = has("avx512_bf16");
  r.cpu.amx = has("amx_tile") && has("amx_bf16");
  if (p.blas_core) r.cpu.blas_core = p.blas_core();
}

void read_memory(const DoctorProbes& p, DoctorReport& r) {
  for (const auto& [k, v] : key_values(read_text(host_path(p.root, "/proc/meminfo")))) {
    const uint64_t kib = std::strtoull(v.c_str(), nullptr, 10);
    if (k == "MemTotal") r.memory.total = kib * 1024;
    if (k == "MemAvailable") r.memory.available = kib * 1024;
  }
  if (p.fs_space) r.memory.shm = p.fs_space(host_path(p.root, "/dev/shm"));
}

void read_network(const DoctorProbes& p, DoctorReport& r) {
  if (p.interfaces) r.net.interfaces = p.interfaces();
  r.net.ifname_spec = env_value(p.env, "KILN_SOCKET_IFNAME");
  try {
    r.net.multi_node = choose_interface(r.net.ifname_spec, true, r.net.interfaces);
  } catch (const Error& e) {
    r.net.multi_node_error = e.what();
  }
  try {
    r.net.single_node = choose_interface(r.net.ifname_spec, false, r.net.interfaces);
  } catch (const Error&) {
  }
}

bool listed_variable(const std::string& k) {
  for (const char* prefix : {"NCCL_", "FI_", "KILN_", "GLOO_", "OPENBLAS_", "OMP_"}) {
    if (k.starts_with(prefix)) return true;
  }
  for (const char* name : {"LD_LIBRARY_PATH", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES",
                           "NVIDIA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT"}) {
    if (k == name) return true;
  }
  return false;
}

// Secrets (the store token) are reported as set, never shown.
bool secret_variable(const std::string& k) {
  for (const char* w : {"TOKEN", "SECRET", "PASSWORD", "KEY"}) {
    if (k.find(w) != std::string::npos) return true;
  }
  return false;
}

void read_gpus(const DoctorProbes& p, DoctorReport& r) {
  const std::string version = read_text(host_path(p.root, "/proc/driver/nvidia/version"));
  r.gpu.driver_loaded = !version.empty();
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..." (or "Open
  // Kernel Module for x86_64"): the first word shaped like a version.
  std::istringstream words(version.substr(0, version.find('\n')));
  for (std::string w; words >> w;) {
    if (std::count(w.begin(), w.end(), '.') >= 1 &&
        std::isdigit(static_cast<unsigned char>(w[0]))) {
      r.gpu.driver_version = w;
      break;
    }
  }
  const fs::path gpus = host_path(p.root, "/proc/driver/nvidia/gpus");
  for (const auto& bus : sorted_entries(gpus)) {
    GpuDevice d;
    d.bus = bus;
    for (const auto& [k, v] : key_values(read_text(gpus / bus / "information"))) {
      if (k == "Model") d.model = v;
      if (k == "Bus Location") d.bus = v;
    }
    r.gpu.devices.push_back(d);
  }
  if (!p.run) return;
  // nvidia-smi adds memory sizes, and finds the GPUs when procfs shows none (some containers).
  const auto smi =
      p.run("nvidia-smi --query-gpu=name,pci.bus_id,memory.total --format=csv,noheader");
  if (!smi) return;
  std::istringstream rows(*smi);
  for (std::string row; std::getline(rows, row);) {
    const auto cols = split(row, ',');
    if (cols.size() < 3) continue;
    const std::string name = trim(cols[0]), bus = trim(cols[1]), mem = trim(cols[2]);
    // nvidia-smi writes "00000000:53:00.0", procfs "0000:53:00.0": compare bus:device.function.
    auto tail = [](const std::string& b) { return b.size() > 7 ? b.substr(b.size() - 7) : b; };
    bool merged = false;
    for (auto& d : r.gpu.devices) {
      if (tail(d.bus) == tail(bus)) {
        d.memory = mem;
        merged = true;
      }
    }
    if (!merged) r.gpu.devices.push_back({name, bus, mem});
  }
}

void read_cuda(const DoctorProbes& p, DoctorReport& r) {
  const std::string ld_path = env_value(p.env, "LD_LIBRARY_PATH");
  for (const auto& dir : split(ld_path, ':')) {
    if (dir.find("cuda") != std::string::npos && dir.find("compat") != std::string::npos) {
      r.gpu.compat_dirs += (r.gpu.compat_dirs.empty() ? "" : ":") + dir;
    }
  }
  if (p.lib_version) {
    for (const char* lib : {"libcudart.so", "libcudart.so.12", "libcudart.so.11.0"}) {
      if (auto v = p.lib_version(lib, "cudaRuntimeGetVersion")) {
        r.gpu.cuda_runtime = cuda_version_string(v->version);
        r.gpu.cuda_runtime_source = v->path;
        break;
      }
    }
    if (auto v = p.lib_version("libcuda.so.1", "cuDriverGetVersion")) {
      r.gpu.cuda_driver = cuda_version_string(v->version);
      r.gpu.libcuda_path = v->path;
      r.gpu.forward_compat = v->path.find("/compat/") != std::string::npos;
    }
    if (auto v = p.lib_version("libnccl.so.2", "ncclGetVersion")) {
      r.gpu.nccl_version = nccl_version_string(v->version);
      r.gpu.nccl_path = v->path;
    }
  }
  if (r.gpu.cuda_runtime.empty()) {
    const fs::path vj = host_path(p.root, "/usr/local/cuda/version.json");
    try {
      if (fs::exists(vj)) {
        const std::string v = read_json_file(vj).at("cuda").at("version").get<std::string>();
        const auto parts = split(v, '.');
        if (parts.size() >= 2) r.gpu.cuda_runtime = parts[0] + "." + parts[1];
        r.gpu.cuda_runtime_source = "/usr/local/cuda/version.json";
      }
    } catch (const std::exception&) {
      // An unreadable version.json reports no runtime, like a missing one.
    }
  }
}

void read_nccl_plugin(const DoctorProbes& p, DoctorReport& r) {
  const std::string wanted = env_value(p.env, "NCCL_NET_PLUGIN");
  r.gpu.net_plugin_wanted = wanted.empty() ? "libnccl-net.so" : wanted;
  if (wanted == "none") return;
  r.gpu.net_plugin = find_library(p, nccl_plugin_candidates(wanted));
  r.efa.ofi_plugin = r.gpu.net_plugin.find("ofi") != std::string::npos;
  for (const auto& dir : library_dirs(p)) {
    for (const auto& name : sorted_entries(host_path(p.root, dir), "libnccl-net")) {
      const std::string path = (fs::path(dir) / name).string();
      auto& found = r.gpu.net_plugins_found;
      if (std::find(found.begin(), found.end(), path) == found.end()) found.push_back(path);
    }
  }
}

void read_efa(const DoctorProbes& p, DoctorReport& r) {
  const fs::path ib = host_path(p.root, "/sys/class/infiniband");
  for (const auto& name : sorted_entries(ib)) {
    std::error_code ec;
    const fs::path driver = fs::read_symlink(ib / name / "device" / "driver", ec);
    const bool efa = (!ec && driver.filename() == "efa") || name.starts_with("efa");
    (efa ? r.efa.devices : r.efa.other_rdma).push_back(name);
  }
  r.efa.uverbs = sorted_entries(host_path(p.root, "/dev/infiniband"), "uverbs");
  if (p.run) {
    // The EFA installer puts fi_info in /opt/amazon/efa/bin, often not on PATH.
    r.efa.libfabric_efa =
        p.run("PATH=\"$PATH:/opt/amazon/efa/bin\" fi_info -p efa -t FI_EP_RDM").has_value();
  }
}

}  // namespace

fs::path host_path(const fs::path& root, const std::string& absolute) {
  return root / fs::path(absolute).relative_path();
}

// cudaRuntimeGetVersion / cuDriverGetVersion encode 1000 * major + 10 * minor.
std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

// ncclGetVersion: 10000 * major + 100 * minor + patch since 2.9, 1000 * major + ... before.
std::string nccl_version_string(int v) {
  if (v >= 10000) return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
}

std::string env_value(const std::map<std::string, std::string>& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? "" : it->second;
}

std::vector<std::string> nccl_plugin_candidates(const std::string& wanted) {
  if (wanted.empty()) return {"libnccl-net.so"};
  if (wanted.find('/') != std::string::npos) return {wanted};
  return {"libnccl-net-" + wanted + ".so", wanted};
}

std::vector<std::string> library_dirs(const DoctorProbes& p) {
  std::vector<std::string> dirs = split(env_value(p.env, "LD_LIBRARY_PATH"), ':');
  // What ldconfig caches: /etc/ld.so.conf.d/*.conf (the EFA installer adds its directories).
  const fs::path conf = host_path(p.root, "/etc/ld.so.conf.d");
  for (const auto& f : sorted_entries(conf)) {
    std::istringstream in(read_text(conf / f));
    for (std::string line; std::getline(in, line);) {
      line = trim(line);
      if (!line.empty() && line[0] == '/') dirs.push_back(line);
    }
  }
  for (const char* d : {"/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                        "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib64", "/lib"}) {
    dirs.emplace_back(d);
  }
  return dirs;
}

std::string find_library(const DoctorProbes& p, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    if (name.find('/') != std::string::npos) {
      if (fs::exists(host_path(p.root, name))) return name;
      continue;
    }
    for (const auto& dir : library_dirs(p)) {
      if (fs::exists(host_path(p.root, dir) / name)) return (fs::path(dir) / name).string();
    }
  }
  return "";
}

DoctorReport collect_facts(const DoctorProbes& p) {
  DoctorReport r;
  read_cpu(p, r);
  read_memory(p, r);
  read_network(p, r);
  for (const auto& [k, v] : p.env) {
    if (listed_variable(k)) r.env.emplace_back(k, secret_variable(k) ? "<set>" : v);
  }
  read_gpus(p, r);
  read_cuda(p, r);
  read_nccl_plugin(p, r);
  if (p.cuda_backend) r.cuda_backend = p.cuda_backend();
  read_efa(p, r);
  if (p.gloo) r.gloo = p.gloo(env_value(p.env, "KILN_SOCKET_IFNAME"));
  return r;
}

GlooProbe probe_gloo_loopback(const std::string& ifname, uint64_t bytes, int iters) {
  constexpr int kWorld = 2;
  GlooProbe out;
  out.ran = true;
  out.bytes = bytes;
  const size_t n = bytes / sizeof(float);
  auto store = std::make_shared<MemoryStore>();
  std::string errors[kWorld];
  std::vector<double> times;
  size_t wrong = 0;
  // The transport a run over this path would use: an interface named (KILN_SOCKET_IFNAME) is
  // the path of a group spanning hosts, whose pairs authenticate (dist.authenticate_pairs
  // auto); the default, loopback, is a single node's, which keeps Gloo's own transport.
  const std::string token = ifname.empty() ? "" : random_token();
  auto body = [&](int rank) {
    GlooOptions o;
    o.ifname = ifname;
    o.timeout = std::chrono::seconds(30);
    o.group_name = "doctor";
    o.same_host_shm = false;  // the probe measures the network path
    o.pair_token = token;
    o.authenticate = token.empty() ? PairAuth::kOff : PairAuth::kOn;
    auto comm = make_gloo_communicator(store, rank, kWorld, o);
    if (rank == 0) out.transport = comm->transport_info();
    // Small integers: the sum is exact, so the check compares with ==.
    std::vector<float> x(n);
    for (int it = 0; it <= iters; ++it) {
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i + rank) % 4);
      comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      comm->all_reduce(x.data(), n, ReduceOp::kSum);
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rank == 0 && it > 0) times.push_back(dt);
    }
    if (rank == 0) {
      for (size_t i = 0; i < n; ++i) wrong += x[i] != static_cast<float>(i % 4 + (i + 1) % 4);
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    if (!errors[r].empty() && out.error.empty())
      out.error = fmt::format("rank {}: {}", r, errors[r]);
  }
  if (out.error.empty() && wrong > 0) out.error = fmt::format("{} wrong sums of {}", wrong, n);
  out.ok = out.error.empty() && out.transport.has_value();
  if (out.ok && !times.empty()) {
    std::sort(times.begin(), times.end());
    out.seconds = times[times.size() / 2];
    // nccl-tests' all-reduce bus bandwidth: algbw * 2(n-1)/n, which is algbw itself for n = 2.
    out.busbw_gbps = static_cast<double>(bytes) / out.seconds / 1e9 * 2.0 * (kWorld - 1) / kWorld;
  }
  return out;
}

DoctorProbes system_probes(uint64_t gloo_bytes) {
  DoctorProbes p;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) p.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  p.interfaces = list_interfaces;
  p.fs_space = [](const fs::path& path) -> std::optional<FsSpace> {
    struct statvfs s {};
    if (::statvfs(path.c_str(), &s) != 0) return std::nullopt;
    return FsSpace{static_cast<uint64_t>(s.f_blocks) * s.f_frsize,
                   static_cast<uint64_t>(s.f_bavail) * s.f_frsize};
  };
  p.run = [](const std::string& cmd) -> std::optional<std::string> {
    FILE* f = ::popen((cmd + " 2>/dev/null").c_str(), "r");
    if (f == nullptr) return std::nullopt;
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    if (::pclose(f) != 0) return std::nullopt;
    return out;
  };
  p.lib_version = [](const std::string& lib, const std::string& sym) -> std::optional<LibVersion> {
    void* h = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return std::nullopt;
    std::optional<LibVersion> out;
    using GetVersion = int (*)(int*);
    if (auto fn = reinterpret_cast<GetVersion>(::dlsym(h, sym.c_str()))) {
      int v = 0;
      if (fn(&v) == 0) {
        out = LibVersion{v, lib};
        link_map* map = nullptr;
        if (::dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
          out->path = map->l_name;
        }
      }
    }
    // Left loaded: unloading the CUDA driver library is not safe in every version.
    return out;
  };
  p.blas_core = blas_core_name;
  p.cuda_backend = probe_cuda_backend;
  p.gloo = [gloo_bytes](const std::string& ifname) {
    return probe_gloo_loopback(ifname, gloo_bytes);
  };
  return p;
}

}  // namespace kiln
