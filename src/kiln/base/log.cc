#include "kiln/base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace kiln {

void init_logging() {
  auto logger = spdlog::stderr_color_mt("kiln");
  logger->set_pattern("[%H:%M:%S] %^%l%$ %v");
  const char* lvl = std::getenv("KILN_LOG_LEVEL");
  logger->set_level(lvl != nullptr ? spdlog::level::from_str(lvl) : spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace kiln
