#include "protocol/key_id.h"

#include <xxhash.h>

#include <atomic>
#include <random>

#include "limiter/status.h"

namespace limiter {
namespace {

std::atomic<bool> seed_used{false};
uint64_t seed_value = [] {
  std::random_device rd;
  return (uint64_t{rd()} << 32 | rd()) ^ 0x6b65792d69643a31;  // "key-id:1"
}();

}  // namespace

uint64_t KeyIdSeed() {
  // Read first: the flag's cache line stays shared between the threads making ids.
  if (!seed_used.load(std::memory_order_relaxed)) seed_used.store(true);
  return seed_value;
}

void SetKeyIdSeed(uint64_t seed) {
  LIMITER_CHECK(!seed_used.load() || seed == seed_value,
                "SetKeyIdSeed after a key id was made with another seed");
  seed_value = seed;
}

bool KeyIdSeedUsed() { return seed_used.load(); }

uint64_t KeyIdSeedDigest() {
  const uint64_t seed = KeyIdSeed();
  return XXH3_64bits_withSeed(&seed, sizeof(seed), 0x7365656420646967);  // "seed dig"
}

KeyId MakeKeyId(std::initializer_list<std::string_view> parts) {
  // Each part hashed in place, chained through the seed: no copy into a buffer (whose
  // small stores the hash would then read across, stalling on store forwarding), and the
  // part boundaries stay unambiguous.
  uint64_t seed = KeyIdSeed();
  const std::string_view* last = parts.begin() + (parts.size() - 1);
  for (const std::string_view* p = parts.begin(); p != last; ++p) seed = ChainKeyId(seed, *p);
  return KeyIdOf(seed, *last);
}

}  // namespace limiter
