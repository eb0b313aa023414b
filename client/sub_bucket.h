// Which bucket of a limit an op goes to: the key itself, or sub-bucket `index` of a hot key
// its owner split `k` ways in split `epoch` (the sub-bucket lives on the owner of "key#index").
#pragma once

#include <cstdint>

namespace limiter {

struct SubBucket {
  uint16_t k = 0;  // 0: the key itself
  uint16_t index = 0;
  uint32_t epoch = 0;
};

}  // namespace limiter
