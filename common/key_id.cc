#include "common/key_id.h"

#include <xxhash.h>

#include <random>

namespace limiter {

uint64_t KeyIdSeed() {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32 | rd()) ^ 0x6b65792d69643a31;  // "key-id:1"
  }();
  return seed;
}

KeyId MakeKeyId(std::initializer_list<std::string_view> parts) {
  // Each part hashed in place, chained through the seed: no copy into a buffer (whose
  // small stores the hash would then read across, stalling on store forwarding), and the
  // part boundaries stay unambiguous.
  uint64_t seed = KeyIdSeed();
  const std::string_view* last = parts.begin() + (parts.size() - 1);
  for (const std::string_view* p = parts.begin(); p != last; ++p) {
    seed = XXH3_64bits_withSeed(p->data(), p->size(), seed);
  }
  const XXH128_hash_t h = XXH3_128bits_withSeed(last->data(), last->size(), seed);
  KeyId id{h.low64, h.high64};
  if ((id.lo | id.hi) == 0) id.hi = 1;
  return id;
}

}  // namespace limiter
