// SourceCounts: how many connections of one kind (not yet authenticated, in a TLS handshake)
// each source address holds, for the per-source caps on the data port. A source is an IPv4
// address, or an IPv6 /64 (one host can hold a whole /64). Counts live in a fixed table of
// atomic counters indexed by a seeded hash of the source: no allocation, no lock, and an
// attacker cannot choose sources that share a counter with a victim's; two sources that do
// share one are held to the cap together (stricter, never looser).
//
// Thread-safety: any thread (the acceptor adds, each connection's worker takes away).
#pragma once

#include <array>
#include <asio/ip/address.hpp>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace limiter {

class SourceCounts {
 public:
  static constexpr size_t kBuckets = 4096;
  SourceCounts();

  // The counter of `address`'s source.
  size_t BucketOf(const asio::ip::address& address) const;
  // Takes one from the source's count if it holds fewer than `cap`; false (nothing taken)
  // when it holds that many.
  bool TryAdd(size_t bucket, int64_t cap) {
    std::atomic<int32_t>& c = counts_[bucket];
    int32_t n = c.load(std::memory_order_relaxed);
    while (n < cap) {
      if (c.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
    }
    return false;
  }
  void Remove(size_t bucket) { counts_[bucket].fetch_sub(1, std::memory_order_relaxed); }
  int32_t Count(size_t bucket) const { return counts_[bucket].load(std::memory_order_relaxed); }

 private:
  const uint64_t seed_;
  std::array<std::atomic<int32_t>, kBuckets> counts_{};
};

}  // namespace limiter
