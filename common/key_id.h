// KeyId: a 128-bit xxh3 of a key's parts (policy, key, ...), each hashed in turn, under a
// seed drawn at random once per process. The node keys its store (stripe and table slot) by
// it and the client its local buckets, so no key string is kept; the random seed keeps the
// store's probe chains from being computed offline by someone choosing keys. A KeyId
// therefore means nothing in another process: never store one or send one (routing uses the
// ring's own, unseeded hash of the routing key, the same everywhere: ring.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace limiter {

struct KeyId {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const KeyId&, const KeyId&) = default;
};

struct KeyIdHash {
  size_t operator()(const KeyId& id) const { return static_cast<size_t>(id.lo); }
};

// Never all zero (that marks an empty slot). Precondition: at least one part.
KeyId MakeKeyId(std::initializer_list<std::string_view> parts);

// This process's seed (tests).
uint64_t KeyIdSeed();

}  // namespace limiter
