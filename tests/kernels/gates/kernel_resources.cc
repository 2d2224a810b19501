#include "kernels/gates/kernel_resources.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <sstream>

#include "kernels/emul/kernel_name.h"
#include "kiln/base/error.h"

namespace kiln::gates {

namespace {

// .maxntid of each .entry of a PTX file, by mangled name.
std::map<std::string, int> max_threads(const std::string& ptx) {
  std::map<std::string, int> out;
  static const std::regex entry(R"(\.entry\s+([A-Za-z0-9_$]+)\s*\()");
  static const std::regex maxntid(R"(\.maxntid\s+(\d+),\s*(\d+),\s*(\d+))");
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), entry); it != std::sregex_iterator();
       ++it) {
    // The directives lie between the parameter list and the body's brace.
    const size_t close = ptx.find(')', static_cast<size_t>(it->position() + it->length()));
    const size_t body = ptx.find('{', close);
    const std::string between = ptx.substr(close, body - close);
    std::smatch m;
    if (std::regex_search(between, m, maxntid)) {
      out[(*it)[1]] = std::stoi(m[1]) * std::stoi(m[2]) * std::stoi(m[3]);
    } else {
      out[(*it)[1]] = 0;
    }
  }
  return out;
}

std::string base_name(const std::string& name) { return name.substr(0, name.find('<')); }

}  // namespace

std::vector<KernelResources> parse_ptxas(const std::string& report, const std::string& ptx) {
  static const std::regex compiling(R"(Compiling entry function '([^']+)' for 'sm_(\d+)')");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  const std::map<std::string, int> bounds = max_threads(ptx);
  std::vector<KernelResources> out;
  std::istringstream in(report);
  std::string line, mangled;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, compiling)) {
      mangled = m[1];
      KernelResources k;
      k.sm = std::stoi(m[2]);
      k.name = emul::demangled_short_name(mangled.c_str());
      auto b = bounds.find(mangled);
      KILN_CHECK(b != bounds.end(), "ptxas entry {} not in the PTX", mangled);
      k.max_threads = b->second;
      out.push_back(k);
    } else if (!out.empty() && std::regex_search(line, m, used)) {
      out.back().registers = std::stoi(m[1]);
      if (std::regex_search(line, m, smem)) out.back().static_shared = std::stoul(m[1]);
    }
  }
  return out;
}

const ArchLimits& arch_limits(int sm) {
  static const ArchLimits limits[] = {
      {80, 2048, 32, 164 << 10, 163 << 10},
      {89, 1536, 24, 100 << 10, 99 << 10},
      {90, 2048, 32, 228 << 10, 227 << 10},
  };
  for (const ArchLimits& a : limits) {
    if (a.sm == sm) return a;
  }
  fail("no limits known for sm_{}", sm);
}

namespace {
int registers_per_warp(int registers) { return (registers * 32 + 255) / 256 * 256; }
int warps(int threads) { return (threads + 31) / 32; }
}  // namespace

int blocks_per_sm(const KernelResources& k, int threads, size_t dynamic, const ArchLimits& a) {
  const int by_regs = kRegistersPerSm / (registers_per_warp(k.registers) * warps(threads));
  const size_t shared = k.static_shared + dynamic + kReservedShared;
  const int by_shared = static_cast<int>(a.shared_per_sm / shared);
  const int by_threads = a.threads_per_sm / (warps(threads) * 32);
  return std::min({by_regs, by_shared, by_threads, a.blocks_per_sm});
}

std::vector<std::string> check_kernels(const std::vector<KernelResources>& kernels,
                                       const Census& census,
                                       const std::vector<OccupancyException>& exceptions) {
  std::map<std::string, int> threads_by_base;
  for (const auto& [name, t] : census.threads) {
    int& most = threads_by_base[base_name(name)];
    most = std::max(most, t);
  }
  std::vector<std::string> bad;
  for (const KernelResources& k : kernels) {
    const std::string where = fmt::format("{} (sm_{})", k.name, k.sm);
    auto exact = census.threads.find(k.name);
    auto base = threads_by_base.find(base_name(k.name));
    if (exact == census.threads.end() && base == threads_by_base.end()) {
      bad.push_back(where + ": never launched by the census, so its launch is unchecked");
      continue;
    }
    const int threads = exact != census.threads.end() ? exact->second : base->second;
    auto dyn = census.dynamic_shared.find(k.name);
    const size_t dynamic = dyn != census.dynamic_shared.end() ? dyn->second : 0;
    const ArchLimits& a = arch_limits(k.sm);
    if (registers_per_warp(k.registers) * warps(threads) > kRegistersPerSm) {
      bad.push_back(fmt::format("{}: {} registers x {} threads exceed the block's {}", where,
                                k.registers, threads, kRegistersPerSm));
    }
    if (threads == 1024 && k.max_threads == 0) {
      bad.push_back(where + ": launched with 1024 threads without __launch_bounds__");
    }
    if (k.max_threads > 0 && threads > k.max_threads) {
      bad.push_back(
          fmt::format("{}: launched with {} threads, bounds {}", where, threads, k.max_threads));
    }
    if (k.static_shared + dynamic > a.shared_per_block) {
      bad.push_back(fmt::format("{}: {} bytes of shared memory, sm_{} allows {}", where,
                                k.static_shared + dynamic, k.sm, a.shared_per_block));
    }
    if (k.name.rfind("flash_", 0) == 0) {
      const int blocks = blocks_per_sm(k, threads, dynamic, a);
      const auto ex = std::find_if(exceptions.begin(), exceptions.end(),
                                   [&](const auto& e) { return e.name == k.name && e.sm == k.sm; });
      const int allowed = ex != exceptions.end() ? ex->blocks : 2;
      if (blocks < allowed) {
        bad.push_back(fmt::format("{}: {} block(s) per SM ({} registers, {} + {} bytes shared)",
                                  where, blocks, k.registers, k.static_shared, dynamic));
      }
      if (ex != exceptions.end() && blocks >= 2) {
        bad.push_back(fmt::format("{}: {} blocks per SM now: drop its exception", where, blocks));
      }
    }
  }
  return bad;
}

}  // namespace kiln::gates
