// Where the checkout and the build put things, for tests that read the source tree's files
// or start the real binaries. Only build_paths.cc is compiled with these paths, so no other
// test file's object depends on where the clone lives and a second clone reuses the compiler
// cache (CCACHE_BASEDIR, set by the top CMakeLists.txt). Thread-safe: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace limiter::testing {

// The checkout's top folder, and a path under it ("examples/policies.yaml").
std::string SourceDir();
std::string SourcePath(std::string_view relative);

// The binaries of this build.
std::string LimiterdBin();
std::string GatewayBin();
std::string BillingGatewayBin();
std::string LimiterBenchBin();
std::string LimiterctlBin();

}  // namespace limiter::testing
