#include "test/support/policies.h"

#include <gtest/gtest.h>

#include <utility>

#include "common/policy_file.h"

namespace limiter::testing {

PolicySet Policies(std::string_view yaml, const std::string& file) {
  Result<PolicySet> parsed = ParsePolicies(yaml, file);
  if (!parsed.ok()) {
    ADD_FAILURE() << "the test's policies do not parse: " << parsed.error();
    return PolicySet();
  }
  return std::move(parsed).value();
}

}  // namespace limiter::testing
