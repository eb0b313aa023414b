// A log-linear histogram of non-negative integers (latencies in microseconds, say): exact
// below 32, then 16 buckets per power of two (under 6.25% error), up to 2^40.
//
// Thread-safety: one thread records, any thread may read at the same time (relaxed atomics:
// a reader sees each count, though not all counts at one instant). Merge into a snapshot to
// combine workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace limiter {

class Histogram {
 public:
  static constexpr int kSubBits = 4;             // 16 buckets per power of two
  static constexpr int kLinear = 2 << kSubBits;  // values below 32 are exact
  static constexpr int kMaxBits = 40;
  static constexpr int kBuckets = kLinear + (kMaxBits - kSubBits - 1) * (1 << kSubBits);

  Histogram();
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Record(uint64_t value);

  static int BucketOf(uint64_t value);
  static uint64_t BucketLow(int bucket);   // smallest value in the bucket
  static uint64_t BucketHigh(int bucket);  // largest value in the bucket

  // A plain copy that can be merged and queried.
  struct Snapshot {
    std::vector<uint64_t> counts = std::vector<uint64_t>(kBuckets);
    uint64_t count = 0;
    uint64_t sum = 0;
    uint64_t max = 0;

    void Merge(const Snapshot& other);
    // Adds one value, as Histogram::Record does (for a snapshot built by one thread).
    void Record(uint64_t value);
    // The value at quantile q in [0, 1]: the upper end of the bucket holding it, capped at
    // the largest value recorded. 0 when empty.
    uint64_t Quantile(double q) const;
  };
  Snapshot Read() const;
  void AddTo(Snapshot& snapshot) const;

 private:
  std::vector<std::atomic<uint64_t>> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
};

}  // namespace limiter
