// gtest printers for the project's enums, so that failures name values instead of bytes.
#pragma once

#include <ostream>

#include "common/algorithm_kind.h"

namespace limiter {

inline void PrintTo(Algorithm a, std::ostream* os) { *os << AlgorithmName(a); }

}  // namespace limiter
