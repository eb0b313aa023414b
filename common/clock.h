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
  // Wall-clock milliseconds since the Unix epoch; may jump either way. Read only where the
  // calendar matters (calendar windows, durable records' age across a restart).
  virtual int64_t WallMs() const = 0;
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
  int64_t WallMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told to; for tests. Thread-safe. Its wall clock starts at
// kWallStartMs (2026-01-01T00:00:00Z) plus the start, moves with Advance, and can be set on
// its own (SetWall: a wall-clock jump).
class ManualClock final : public Clock {
 public:
  static constexpr int64_t kWallStartMs = 1'767'225'600'000;
  explicit ManualClock(int64_t start_ms = 0) : now_(start_ms), wall_(kWallStartMs + start_ms) {}
  int64_t NowMs() const override { return now_.load(std::memory_order_relaxed); }
  int64_t WallMs() const override { return wall_.load(std::memory_order_relaxed); }
  void Advance(int64_t ms) {
    now_.fetch_add(ms, std::memory_order_relaxed);
    wall_.fetch_add(ms, std::memory_order_relaxed);
  }
  void Set(int64_t ms) {
    wall_.fetch_add(ms - now_.exchange(ms, std::memory_order_relaxed), std::memory_order_relaxed);
  }
  void SetWall(int64_t wall_ms) { wall_.store(wall_ms, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
  std::atomic<int64_t> wall_;
};

}  // namespace limiter
