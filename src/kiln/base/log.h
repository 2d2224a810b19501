// Logging through spdlog: one process-wide logger named "kiln", level from KILN_LOG_LEVEL.
#pragma once

#include <spdlog/spdlog.h>

namespace kiln {

// Configures the default logger (stderr, level from KILN_LOG_LEVEL, default "info").
void init_logging();

}  // namespace kiln

#define KILN_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define KILN_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define KILN_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
