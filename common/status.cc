#include "limiter/status.h"

#include <cstdio>
#include <cstdlib>

namespace limiter::detail {

void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s: %s\n", file, line, condition, message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace limiter::detail
