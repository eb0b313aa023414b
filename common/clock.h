// The clock seam (STYLE.md 3): stateful components take a Clock&; algorithms take `now`.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace limiter {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds on a monotonic scale; never decreases.
  virtual int64_t NowMs() const = 0;
};

// CLOCK_MONOTONIC: milliseconds since boot, so node times survive a process restart on the
// same machine. Thread-safe.
class SteadyClock final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told to; for tests. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ms = 0) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(std::memory_order_relaxed); }
  void Advance(int64_t ms) { now_.fetch_add(ms, std::memory_order_relaxed); }
  void Set(int64_t ms) { now_.store(ms, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace limiter
