#include "server/source_counts.h"

#include <xxhash.h>

#include <random>

namespace limiter {
namespace {

uint64_t RandomSeed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) | rd();
}

}  // namespace

SourceCounts::SourceCounts() : seed_(RandomSeed()) {}

size_t SourceCounts::BucketOf(const asio::ip::address& address) const {
  uint8_t bytes[16] = {};
  size_t n = 0;
  if (address.is_v4()) {
    const auto v4 = address.to_v4().to_bytes();
    std::copy(v4.begin(), v4.end(), bytes);
    n = v4.size();
  } else {
    const asio::ip::address_v6 v6 = address.to_v6();
    if (v6.is_v4_mapped()) {
      const auto v4 = asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_bytes();
      std::copy(v4.begin(), v4.end(), bytes);
      n = v4.size();
    } else {
      const auto all = v6.to_bytes();
      std::copy(all.begin(), all.begin() + 8, bytes);  // the /64
      bytes[8] = 6;                                    // never equal to an IPv4 address's bytes
      n = 9;
    }
  }
  return static_cast<size_t>(XXH3_64bits_withSeed(bytes, n, seed_) % kBuckets);
}

}  // namespace limiter
