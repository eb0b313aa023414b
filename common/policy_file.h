// Loading the policy file (YAML). Any problem (unknown field, wrong type, zero or negative
// limit, unknown algorithm or class, duplicate name, unknown parent, parent cycle) is one
// error message of the form
//   FILE:LINE:COLUMN: policy 'NAME', field 'FIELD': what is wrong
// and no PolicySet; nothing is ever defaulted silently. The file format is in README.md.
#pragma once

#include <string>
#include <string_view>

#include "common/policy.h"
#include "limiter/status.h"

namespace limiter {

Result<PolicySet> LoadPolicyFile(const std::string& path);
// `source` names the text in messages (a file name).
Result<PolicySet> ParsePolicies(std::string_view text, const std::string& source);

}  // namespace limiter
