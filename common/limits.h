// Bounds on what one request may carry; the node rejects anything beyond them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace limiter {

inline constexpr size_t kMaxKeyBytes = 256;       // keys and tenants
inline constexpr size_t kMaxNameBytes = 64;       // policy and operation names
inline constexpr size_t kMaxLimitsPerCheck = 16;  // limits named by one CHECK

}  // namespace limiter
