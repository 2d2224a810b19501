#include "kiln/base/fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kiln {

namespace {

struct FaultSpec {
  bool armed = false;
  int rank = -1;
  long long step = -1;
  std::string kind, point;
};

FaultSpec parse_spec() {
  FaultSpec f;
  const char* spec = std::getenv("KILN_FAULT");
  if (spec == nullptr) return f;
  char kind[48] = {}, attempt[16] = "0";
  if (std::sscanf(spec, "%d:%lld:%47[a-z@]:%15s", &f.rank, &f.step, kind, attempt) < 3) {
    std::fprintf(stderr, "KILN_FAULT='%s': expected RANK:STEP:KIND[@POINT][:ATTEMPT]\n", spec);
    std::exit(2);
  }
  const char* current = std::getenv("KILN_RESTART_ATTEMPT");
  if (std::strcmp(attempt, "*") != 0 && (current ? std::atoi(current) : 0) != std::atoi(attempt)) {
    return f;
  }
  std::string k = kind;
  const size_t at = k.find('@');
  f.kind = k.substr(0, at);
  f.point = at == std::string::npos ? "step" : k.substr(at + 1);
  f.armed = true;
  return f;
}

const FaultSpec& spec() {
  static const FaultSpec s = parse_spec();
  return s;
}

std::atomic<int> g_rank{-1};
std::atomic<long long> g_step{-1};
std::atomic<bool> g_fired{false};

}  // namespace

void fault_begin_step(int rank, int64_t step) {
  g_rank = rank;
  g_step = step;
  fault_point("step");
}

void fault_point(const char* point) { fault_point(point, g_step.load()); }

void fault_point(const char* point, int64_t step) {
  const FaultSpec& f = spec();
  if (!f.armed || g_fired || f.rank != g_rank || f.step != step || f.point != point) return;
  if (g_fired.exchange(true)) return;
  std::fprintf(stderr, "KILN_FAULT: rank %d injecting '%s' at step %lld (%s)\n", f.rank,
               f.kind.c_str(), f.step, point);
  std::fflush(stderr);
  if (f.kind == "exit") std::_Exit(3);
  if (f.kind == "abort") std::abort();
  if (f.kind == "kill") ::kill(::getpid(), SIGKILL);
  if (f.kind == "term") ::kill(::getppid(), SIGTERM);  // and carry on
  if (f.kind == "hang") {
    for (;;) ::pause();
  }
}

}  // namespace kiln
