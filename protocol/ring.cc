#include "protocol/ring.h"

#include <xxhash.h>

#include <algorithm>

namespace limiter {
namespace {

// A strong 64-bit mix (the murmur3 finalizer): the weight of a member for a slot.
uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb93fe53ec4d1ULL;
  x ^= x >> 33;
  return x;
}

void Normalize(std::vector<std::string>& members) {
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  if (members.size() > Ring::kMaxMembers) members.resize(Ring::kMaxMembers);
}

}  // namespace

bool Ring::HasMembers(std::vector<std::string> members) const {
  Normalize(members);
  return members == members_;
}

Ring::Ring(std::vector<std::string> members) : members_(std::move(members)) {
  Normalize(members_);
  if (members_.empty()) return;

  std::string joined;
  for (const std::string& m : members_) joined += m + '\n';
  version_ = XXH3_64bits(joined.data(), joined.size()) | 1;

  std::vector<uint64_t> seeds;
  for (const std::string& m : members_) seeds.push_back(XXH3_64bits(m.data(), m.size()));
  table_.resize(kSlots);
  for (uint64_t slot = 0; slot < kSlots; ++slot) {
    const uint64_t s = slot * 0x9e3779b97f4a7c15ULL;
    uint64_t best = 0;
    uint16_t owner = 0;
    for (size_t i = 0; i < seeds.size(); ++i) {
      const uint64_t weight = Mix(seeds[i] ^ s);
      if (weight > best || i == 0) {
        best = weight;
        owner = static_cast<uint16_t>(i);
      }
    }
    table_[slot] = owner;
  }
}

uint32_t Ring::SlotOf(std::string_view routing_key) {
  return static_cast<uint32_t>(XXH3_64bits(routing_key.data(), routing_key.size()) & (kSlots - 1));
}

std::vector<double> Ring::Shares() const {
  std::vector<double> shares(members_.size(), 0.0);
  for (uint16_t owner : table_) shares[owner] += 1.0 / static_cast<double>(kSlots);
  return shares;
}

}  // namespace limiter
