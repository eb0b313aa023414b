// The policy fixture of the tests: a policy file's text parsed into a PolicySet, the test
// failing with the parse error when it does not parse. Thread-safety: a pure function (gtest's
// failure reporting is thread-safe).
#pragma once

#include <string>
#include <string_view>

#include "common/policy.h"

namespace limiter::testing {

// The policies of `yaml`. A file that does not parse fails the current test with the error
// (which names `file`) and gives an empty set.
PolicySet Policies(std::string_view yaml, const std::string& file = "test.yaml");

}  // namespace limiter::testing
