// KeyId: a 128-bit xxh3 of a key's parts (policy, key, ...), each hashed in turn, under a
// seed. The node keys its store (stripe and table slot) by it and the client its local
// buckets, so no key string is kept; the seed keeps the store's probe chains from being
// computed offline by someone choosing keys.
//
// The seed is drawn at random once per process, unless the process sets the cluster's
// (SetKeyIdSeed, limiterd: derived from the cluster secret) before it makes any id: then every
// node of the cluster makes the same id for the same key, and a node giving a key up can hand
// its state to the next owner by id (server/handoff.h). A client's ids stay its own.
//
// The top kSlotBits of `hi` are the ring slot of the key's routing key (Ring::SlotOf), so that
// a node can tell, from the id alone, which node owns the key under any ring.
#pragma once

#include <xxhash.h>

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
// The same in steps, for a caller that makes many ids with the same leading parts (a
// policy's name): MakeKeyId({a, b, c}) == KeyIdOf(ChainKeyId(ChainKeyId(KeyIdSeed(), a), b), c).
inline uint64_t ChainKeyId(uint64_t seed, std::string_view part) {
  return XXH3_64bits_withSeed(part.data(), part.size(), seed);
}
inline KeyId KeyIdOf(uint64_t seed, std::string_view last) {
  const XXH128_hash_t h = XXH3_128bits_withSeed(last.data(), last.size(), seed);
  KeyId id{h.low64, h.high64};
  if ((id.lo | id.hi) == 0) id.hi = 1;
  return id;
}

inline constexpr int kSlotBits = 18;  // Ring::kSlots == 1 << kSlotBits
// `id` with its ring slot set (slot < 2^kSlotBits).
inline KeyId WithRingSlot(KeyId id, uint32_t slot) {
  constexpr uint64_t kLow = (uint64_t{1} << (64 - kSlotBits)) - 1;
  id.hi = (id.hi & kLow) | (uint64_t{slot} << (64 - kSlotBits));
  if ((id.lo | id.hi) == 0) id.lo = 1;
  return id;
}
inline uint32_t RingSlotOf(const KeyId& id) {
  return static_cast<uint32_t>(id.hi >> (64 - kSlotBits));
}

// This process's seed.
uint64_t KeyIdSeed();
// Sets the seed; only before the first id is made (a crash otherwise). limiterd calls it at
// start with the cluster's seed.
void SetKeyIdSeed(uint64_t seed);
// Whether an id was made already (SetKeyIdSeed with another seed would abort).
bool KeyIdSeedUsed();
// A digest of the seed that does not reveal it, for two nodes to compare theirs.
uint64_t KeyIdSeedDigest();

}  // namespace limiter
