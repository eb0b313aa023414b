#pragma once

#include <string>
#include <string_view>

#include "limiter/status.h"

namespace limiter {

// The whole file, or "PATH: cannot open the WHAT file".
Result<std::string> ReadWholeFile(const std::string& path, std::string_view what);

}  // namespace limiter
