#include "test/support/build_paths.h"

namespace limiter::testing {

std::string SourceDir() { return LIMITER_SOURCE_DIR; }

std::string SourcePath(std::string_view relative) {
  std::string path = LIMITER_SOURCE_DIR;
  path += '/';
  path += relative;
  return path;
}

std::string LimiterdBin() { return LIMITERD_BIN; }
std::string GatewayBin() { return LIMITER_GATEWAY_BIN; }
std::string BillingGatewayBin() { return BILLING_GATEWAY_BIN; }
std::string LimiterBenchBin() { return LIMITER_BENCH_BIN; }
std::string LimiterctlBin() { return LIMITERCTL_BIN; }

}  // namespace limiter::testing
