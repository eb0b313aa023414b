// A counter with one writing thread and any number of readers (metrics scrapes): the write
// is a plain load and store, no locked instruction.
#pragma once

#include <atomic>
#include <cstdint>

namespace limiter {

class Counter {
 public:
  void Add(uint64_t n = 1) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t Get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

}  // namespace limiter
