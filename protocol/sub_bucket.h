// Which bucket of a limit an op goes to: the key itself, or sub-bucket `index` of a hot key
// its owner split `k` ways in split `epoch` (the sub-bucket lives on the owner of "key#index").
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace limiter {

struct SubBucket {
  uint16_t k = 0;  // 0: the key itself
  uint16_t index = 0;
  uint32_t epoch = 0;
  // The owner's token for the split (a cluster with a secret), sent with every op on it.
  std::array<uint8_t, 24> token{};
  uint8_t token_bytes = 0;
  std::span<const uint8_t> token_view() const { return {token.data(), token_bytes}; }
};

}  // namespace limiter
