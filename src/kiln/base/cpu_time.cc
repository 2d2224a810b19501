#include "kiln/base/cpu_time.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace kiln {

double machine_busy_seconds() {
  std::ifstream st("/proc/stat");
  std::string cpu;
  uint64_t user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(st >> cpu >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal)) return 0;
  return static_cast<double>(user + nice + sys + irq + softirq + steal) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double own_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace kiln
