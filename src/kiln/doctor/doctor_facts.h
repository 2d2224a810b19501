// Internal to kiln doctor (doctor_probe.cc reads, doctor_checks.cc judges): path and library
// helpers both need, and the unjudged report.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/doctor/doctor.h"

namespace kiln {

// `absolute` ("/proc/cpuinfo") under the probes' root.
fs::path host_path(const fs::path& root, const std::string& absolute);

// The variable's value, or "" when unset.
std::string env_value(const std::map<std::string, std::string>& env, const std::string& key);

// "12.4" from cudaRuntimeGetVersion / cuDriverGetVersion's 12040.
std::string cuda_version_string(int v);
// "2.21.5" from ncclGetVersion's 22105 (or the pre-2.9 encoding, 1000 * major + ...).
std::string nccl_version_string(int v);

// What NCCL tries to dlopen for NCCL_NET_PLUGIN=`wanted` ("" = unset): libnccl-net-NAME.so,
// then NAME itself; a value with a '/' is a path.
std::vector<std::string> nccl_plugin_candidates(const std::string& wanted);

// Where the dynamic loader looks: LD_LIBRARY_PATH, /etc/ld.so.conf.d, the default directories.
std::vector<std::string> library_dirs(const DoctorProbes& p);

// The first of `names` found (path as the loader would use it), or "".
std::string find_library(const DoctorProbes& p, const std::vector<std::string>& names);

// Every fact, no checks.
DoctorReport collect_facts(const DoctorProbes& p);

}  // namespace kiln
