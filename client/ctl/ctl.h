// limiterctl, as a library: main.cc only forwards to Run, so tests run the real commands.
#pragma once

#include <iosfwd>

namespace limiter::ctl {

// argv[0] is the program name. Returns the process exit status: 0 on success, 1 when the
// input (a trace, a policy file) is bad, CLI11's codes for bad usage.
int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace limiter::ctl
