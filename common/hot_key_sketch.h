// HotKeySketch: the heaviest keys of a stream in bounded memory and time, by Space-Saving
// (Metwally et al., 2005): `capacity` counters; a key not counted takes over the smallest
// counter, inheriting its count as an overestimate. Any key with more than total/capacity
// operations is always present. Counts live in epochs (the node rolls one a second), so a
// key that cools down sinks out within two epochs; a counter's weight is its count over
// the current and the last epoch.
//
// Only the keys of the counters are kept, never every key seen. Each Add is a hash lookup
// and a sift in a heap of `capacity`. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace limiter {

class HotKeySketch {
 public:
  explicit HotKeySketch(size_t capacity = 64);

  // Counts `weight` operations on (policy, key); `hash` identifies the pair (a KeyId half);
  // `tag` is kept with the key (the node marks sub-buckets of split keys with it).
  void Add(int policy, std::string_view key, uint64_t hash, uint64_t weight, bool denied,
           uint16_t tag = 0);
  // Ends the current epoch: its counts become the last epoch's.
  void Roll();

  struct Entry {
    int policy = 0;
    std::string key;
    uint64_t hash = 0;
    uint16_t tag = 0;
    uint64_t last = 0;  // operations in the last full epoch (the rate, per epoch)
    uint64_t current = 0;
    uint64_t error = 0;  // at most this much of last + current belongs to keys it displaced
    uint64_t denied_last = 0;
    uint64_t denied_current = 0;
    uint64_t weight() const { return last + current; }
  };
  // Up to n entries, heaviest first (by last epoch, then current).
  std::vector<Entry> Top(size_t n) const;
  size_t size() const { return entries_.size(); }

 private:
  void SiftDown(size_t pos);
  void Swap(size_t a, size_t b);

  size_t capacity_;
  std::vector<Entry> entries_;
  std::vector<size_t> heap_;                    // entry indices; min-heap by weight
  std::vector<size_t> position_;                // entry index -> position in heap_
  std::unordered_map<uint64_t, size_t> index_;  // hash -> entry index
};

}  // namespace limiter
