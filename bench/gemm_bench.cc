// GEMM library comparison on the matrix products a training step runs: for each linear layer
// (IC -> OC) over N tokens, forward out = x @ W^T, backward dx = dout @ W and dw += dout^T @ x,
// plus the chunked LM head of the fused cross-entropy. Libraries: OpenBLAS (cblas_sgemm, what
// kiln linked before), BLIS (loaded at run time, if installed), oneDNN fp32 and bf16 (kiln's
// gemm()). Prints GFLOP/s per GEMM (fastest of repeats) and the time of one step's GEMMs per
// library, and the CPU time other processes took meanwhile (shared machines are noisy: each
// figure is the fastest of its repeats).
//
//   gemm_bench [--quick] [--min-ms 200] [--cpu-time]   (threads: OMP_NUM_THREADS)
// --cpu-time times each call by the calling thread's CPU time instead of wall time: with
// OMP_NUM_THREADS=1 this is the work itself, unaffected by other processes taking the cores.
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/kernels/ops.h"

namespace {

using Clock = std::chrono::steady_clock;

// One GEMM: C (M, N) (+)= op(A) @ op(B), kiln's row-major convention (see gemm.h).
struct Gemm {
  const char* what;
  bool ta, tb;
  int M, N, K;
  float beta;
  int count;  // how many times one step runs it (layers x linears sharing the shape x chunks)
};

struct Shape {
  const char* name;
  int C, I, H, KV, D, V, layers;
};

// BLIS's typed API, loaded with dlopen so that its BLAS/CBLAS symbols never shadow OpenBLAS's.
using BliSgemm = void (*)(int /*transa*/, int /*transb*/, int64_t m, int64_t n, int64_t k,
                          const float* alpha, const float* a, int64_t rsa, int64_t csa,
                          const float* b, int64_t rsb, int64_t csb, const float* beta, float* c,
                          int64_t rsc, int64_t csc);
using BliSetThreads = void (*)(int64_t);

struct Blis {
  BliSgemm sgemm = nullptr;
  BliSetThreads set_threads = nullptr;
  static Blis load() {
    Blis b;
    for (const char* lib : {"/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", "libblis.so.4"}) {
      void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) continue;
      b.sgemm = reinterpret_cast<BliSgemm>(dlsym(h, "bli_sgemm"));
      b.set_threads = reinterpret_cast<BliSetThreads>(dlsym(h, "bli_thread_set_num_threads"));
      if (b.sgemm != nullptr) break;
    }
    return b;
  }
};

double cpu_busy_jiffies() {  // all CPUs' non-idle time, from /proc/stat
  std::ifstream f("/proc/stat");
  std::string cpu;
  double v[10] = {};
  f >> cpu;
  for (double& x : v) f >> x;
  return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

double self_jiffies() {  // this process's utime + stime, from /proc/self/stat
  std::ifstream f("/proc/self/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t p = s.rfind(')');
  std::vector<std::string> tok;
  size_t i = p + 2;
  while (i < s.size()) {
    size_t j = s.find(' ', i);
    if (j == std::string::npos) j = s.size();
    tok.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return std::stod(tok[11]) + std::stod(tok[12]);  // fields 14 and 15
}

// Seconds per call of fn, repeated for at least min_s (and at least 3 times): the fastest call,
// the best estimate of the uncontended speed on a shared machine.
bool g_cpu_time = false;

double now_s() {
  if (g_cpu_time) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

double time_it(const std::function<void()>& fn, double min_s) {
  fn();  // warm-up: primitive creation, packing buffers, page faults
  std::vector<double> t;
  const double start = now_s();
  while (t.size() < 3 || now_s() - start < min_s) {
    const double t0 = now_s();
    fn();
    t.push_back(now_s() - t0);
    if (t.size() >= 200) break;
  }
  return *std::min_element(t.begin(), t.end());
}

std::vector<Gemm> step_gemms(const Shape& s, int tokens) {
  std::vector<Gemm> g;
  struct Lin {
    const char* name;
    int IC, OC, count;
  };
  const int q = s.H * s.D, kv = s.KV * s.D;
  const Lin lins[] = {
      {"q/o", s.C, q, 2}, {"k/v", s.C, kv, 2}, {"gate/up", s.C, s.I, 2}, {"down", s.I, s.C, 1}};
  for (const Lin& l : lins) {
    const int n = l.count * s.layers;
    g.push_back({l.name, false, true, tokens, l.OC, l.IC, 0.0f, n});   // out = x @ W^T
    g.push_back({l.name, false, false, tokens, l.IC, l.OC, 0.0f, n});  // dx = dout @ W
    g.push_back({l.name, true, false, l.OC, l.IC, tokens, 1.0f, n});   // dw += dout^T @ x
  }
  // LM head, chunked as the fused cross-entropy chunks it.
  const int r =
      static_cast<int>(kiln::ce_chunk_rows(static_cast<size_t>(tokens), static_cast<size_t>(s.V)));
  const int chunks = (tokens + r - 1) / r;
  g.push_back({"lm_head", false, true, r, s.V, s.C, 0.0f, chunks});
  g.push_back({"lm_head", false, false, r, s.C, s.V, 0.0f, chunks});
  g.push_back({"lm_head", true, false, s.V, s.C, r, 1.0f, chunks});
  return g;
}

const char* op_name(const Gemm& g) {
  if (!g.ta && g.tb) return "x@W^T";
  if (!g.ta && !g.tb) return "dout@W";
  return "dout^T@x";
}

}  // namespace

int main(int argc, char** argv) {
  double min_s = 0.2;
  bool quick = false;
  std::string only;  // --run NAME:TOKENS
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--cpu-time") == 0) {
      g_cpu_time = true;
    } else if (std::strcmp(argv[i], "--run") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--min-ms") == 0 && i + 1 < argc) {
      min_s = std::atof(argv[++i]) / 1000.0;
    } else {
      std::fprintf(stderr,
                   "usage: gemm_bench [--quick] [--run SHAPE:TOKENS] [--min-ms MS] [--cpu-time]\n");
      return 2;
    }
  }
  // OpenBLAS reads OPENBLAS_CORETYPE only at load: re-execute with it where it misdetects the CPU
  // (as the CLI does), or its numbers would be those of its generic SSE3 kernels.
  const std::string core = kiln::blas_coretype_override();
  if (!core.empty()) {
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    execv("/proc/self/exe", argv);
  }
  const int threads = omp_get_max_threads();
  Blis blis = Blis::load();
  if (blis.set_threads != nullptr) blis.set_threads(threads);
  openblas_set_num_threads(threads);
  if (g_cpu_time && threads != 1) {
    std::fprintf(stderr, "gemm_bench: --cpu-time needs OMP_NUM_THREADS=1\n");
    return 2;
  }
  std::printf("gemm_bench: %d threads, %s time; OpenBLAS %s core %s; %s; BLIS %s\n", threads,
              g_cpu_time ? "thread CPU" : "wall", openblas_get_config(), openblas_get_corename(),
              kiln::gemm_info().c_str(), blis.sgemm ? "0.9 (blis-openmp)" : "not installed");

  // The instruction-level ceilings: fp32 FMA and bf16 dot products (vdpbf16ps) on all threads.
  std::printf("peak (all %d threads): fp32 FMA %.0f GFLOP/s, bf16 dot product %.0f GFLOP/s\n",
              threads, kiln::measure_fp32_peak_gflops(0.5), kiln::measure_bf16_peak_gflops(0.5));
  const Shape shapes[] = {{"hidden-512", 512, 1408, 8, 2, 64, 151936, 8},
                          {"qwen2.5-0.5b", 896, 4864, 14, 2, 64, 151936, 24},
                          {"25m", 384, 1024, 6, 2, 64, 32000, 8}};
  struct Run {
    int shape, tokens;
  };
  std::vector<Run> runs = {{0, 256}, {0, 2048}, {1, 256}, {1, 512}, {2, 256}, {2, 1024}};
  if (quick) runs = {{0, 256}, {2, 256}};
  if (!only.empty()) {
    std::vector<Run> picked;
    for (const Run& r : runs) {
      if (only == std::string(shapes[r.shape].name) + ":" + std::to_string(r.tokens)) {
        picked.push_back(r);
      }
    }
    if (picked.empty()) {
      std::fprintf(stderr, "gemm_bench: --run %s matches no shape (NAME:TOKENS)\n", only.c_str());
      return 2;
    }
    runs = picked;
  }

  constexpr int kLibs = 4;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const double busy0 = cpu_busy_jiffies(), self0 = self_jiffies();
  const auto wall0 = Clock::now();

  for (const Run& run : runs) {
    const Shape& s = shapes[run.shape];
    std::printf("\n%s, %d tokens (GFLOP/s, fastest of repeats)\n", s.name, run.tokens);
    std::printf("%-8s %-9s %7s %7s %7s %5s %9s %9s %9s %11s\n", "linear", "op", "M", "N", "K", "x",
                "openblas", "blis", "onednn", "onednn-bf16");
    double step_s[kLibs] = {};
    for (const Gemm& g : step_gemms(s, run.tokens)) {
      // Stored shapes: A (M, K) or (K, M); B (K, N) or (N, K); C (M, N).
      const size_t na = static_cast<size_t>(g.M) * g.K, nb = static_cast<size_t>(g.K) * g.N;
      std::vector<float> A(na), B(nb), C(static_cast<size_t>(g.M) * g.N, 0.0f);
      for (float& v : A) v = dist(rng);
      for (float& v : B) v = dist(rng);
      const int lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N, ldc = g.N;
      const double flops = 2.0 * g.M * g.N * g.K;
      std::printf("%-8s %-9s %7d %7d %7d %5d", g.what, op_name(g), g.M, g.N, g.K, g.count);
      for (int l = 0; l < kLibs; ++l) {
        std::function<void()> fn;
        if (l == 0) {
          fn = [&] {
            cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans,
                        g.tb ? CblasTrans : CblasNoTrans, g.M, g.N, g.K, 1.0f, A.data(), lda,
                        B.data(), ldb, g.beta, C.data(), ldc);
          };
        } else if (l == 1) {
          if (blis.sgemm == nullptr) {
            std::printf(" %9s", "-");
            continue;
          }
          // Transposition through strides: element (i, p) of op(A) at rsa * i + csa * p.
          const int64_t rsa = g.ta ? 1 : lda, csa = g.ta ? lda : 1;
          const int64_t rsb = g.tb ? 1 : ldb, csb = g.tb ? ldb : 1;
          fn = [&, rsa, csa, rsb, csb] {
            const float one = 1.0f;
            blis.sgemm(0, 0, g.M, g.N, g.K, &one, A.data(), rsa, csa, B.data(), rsb, csb, &g.beta,
                       C.data(), ldc, 1);
          };
        } else {
          const auto prec = l == 2 ? kiln::GemmPrecision::kFp32 : kiln::GemmPrecision::kBf16;
          fn = [&, prec] {
            kiln::gemm(g.ta, g.tb, g.M, g.N, g.K, A.data(), lda, B.data(), ldb, g.beta, C.data(),
                       ldc, prec);
          };
        }
        const double t = time_it(fn, min_s);
        step_s[l] += t * g.count;
        std::printf(" %*.1f", l == 3 ? 11 : 9, flops / t * 1e-9);
        std::fflush(stdout);
      }
      std::printf("\n");
    }
    std::printf("step GEMM time (ms): openblas %.1f  blis %.1f  onednn %.1f  onednn-bf16 %.1f\n",
                step_s[0] * 1e3, step_s[1] * 1e3, step_s[2] * 1e3, step_s[3] * 1e3);
  }
  const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double others = (cpu_busy_jiffies() - busy0 - (self_jiffies() - self0)) / hz;
  std::printf("\nother processes used %.1f CPU-s during the %.1f s run (%.0f%% of one core)\n",
              others, wall, 100.0 * others / wall);
  return 0;
}
