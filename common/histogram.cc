#include "common/histogram.h"

#include <algorithm>
#include <bit>

namespace limiter {
namespace {

void Bump(std::atomic<uint64_t>& a, uint64_t by) {
  a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);  // single writer
}

}  // namespace

Histogram::Histogram() : counts_(kBuckets) {}

int Histogram::BucketOf(uint64_t v) {
  if (v < static_cast<uint64_t>(kLinear)) return static_cast<int>(v);
  const int bits = std::bit_width(v);  // >= kSubBits + 2
  if (bits > kMaxBits) return kBuckets - 1;
  const int shift = bits - kSubBits - 1;
  const int sub = static_cast<int>((v >> shift) & ((1 << kSubBits) - 1));
  return kLinear + (bits - kSubBits - 2) * (1 << kSubBits) + sub;
}

uint64_t Histogram::BucketLow(int b) {
  if (b < kLinear) return static_cast<uint64_t>(b);
  const int group = (b - kLinear) >> kSubBits;  // bits = group + kSubBits + 2
  const int sub = (b - kLinear) & ((1 << kSubBits) - 1);
  const int shift = group + 1;
  return (uint64_t{1} << (group + kSubBits + 1)) + (static_cast<uint64_t>(sub) << shift);
}

uint64_t Histogram::BucketHigh(int b) {
  return b + 1 < kBuckets ? BucketLow(b + 1) - 1 : UINT64_MAX;
}

void Histogram::Record(uint64_t value) {
  Bump(counts_[static_cast<size_t>(BucketOf(value))], 1);
  Bump(count_, 1);
  Bump(sum_, value);
  if (value > max_.load(std::memory_order_relaxed)) max_.store(value, std::memory_order_relaxed);
}

void Histogram::AddTo(Snapshot& s) const {
  for (int b = 0; b < kBuckets; ++b) {
    s.counts[static_cast<size_t>(b)] +=
        counts_[static_cast<size_t>(b)].load(std::memory_order_relaxed);
  }
  s.count += count_.load(std::memory_order_relaxed);
  s.sum += sum_.load(std::memory_order_relaxed);
  s.max = std::max(s.max, max_.load(std::memory_order_relaxed));
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  AddTo(s);
  return s;
}

void Histogram::Snapshot::Merge(const Snapshot& o) {
  for (size_t b = 0; b < counts.size(); ++b) counts[b] += o.counts[b];
  count += o.count;
  sum += o.sum;
  max = std::max(max, o.max);
}

void Histogram::Snapshot::Record(uint64_t value) {
  ++counts[static_cast<size_t>(BucketOf(value))];
  ++count;
  sum += value;
  max = std::max(max, value);
}

uint64_t Histogram::Snapshot::Quantile(double q) const {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(q * static_cast<double>(total) + 0.5));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts[static_cast<size_t>(b)];
    if (seen >= rank) return std::min(BucketHigh(b), max);
  }
  return max;
}

}  // namespace limiter
