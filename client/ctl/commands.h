// The limiterctl commands, behind the command-line parsing in ctl.cc.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace limiter::ctl {

struct ReplayArgs {
  std::string trace;
  std::string algorithm;  // a name, "all", or empty to take the policy's
  std::optional<int64_t> limit;
  std::optional<std::string> window;  // ms, or a duration such as 1s
  std::optional<int64_t> burst;
  std::string policy_file;
  std::string policy;
  bool json = false;
};
int RunReplay(const ReplayArgs& args, std::ostream& out, std::ostream& err);

}  // namespace limiter::ctl
