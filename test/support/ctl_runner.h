// Runs limiterctl in-process, as its main would, capturing what it prints.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "client/ctl/ctl.h"

namespace limiter::testing {

struct CtlOutcome {
  int status;
  std::string out;
  std::string err;
};

inline CtlOutcome RunCtl(std::vector<std::string> args) {
  args.insert(args.begin(), "limiterctl");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int status = ctl::Run(static_cast<int>(argv.size()), argv.data(), out, err);
  return {status, out.str(), err.str()};
}

}  // namespace limiter::testing
