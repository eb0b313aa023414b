// Simulated time for the client and the node: one event queue that fires in a fixed order
// (time, then order of scheduling), and a node Clock that reads it. Single threaded:
// everything runs inside RunUntil. Part of the simulation library (sim/), which the
// simulation tests (test/sim) and `limiter-bench sim` share; same events in, same order out,
// so a seeded run repeats exactly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

#include "client/scheduler.h"
#include "common/clock.h"

namespace limiter::sim {

class SimScheduler final : public Scheduler {
 public:
  explicit SimScheduler(int64_t start_us = 1'000'000'000) : now_us_(start_us) {}

  int64_t NowUs() const override { return now_us_; }
  void Post(std::function<void()> fn) override { After(0, std::move(fn)); }
  uint64_t After(int64_t delay_us, std::function<void()> fn) override {
    const uint64_t id = next_id_++;
    auto it =
        queue_.emplace(std::make_pair(now_us_ + std::max<int64_t>(0, delay_us), id), std::move(fn));
    by_id_.emplace(id, it.first);
    return id;
  }
  void Offload(std::function<void()> fn) override { Post(std::move(fn)); }
  void Cancel(uint64_t timer) override {
    auto it = by_id_.find(timer);
    if (it == by_id_.end()) return;
    queue_.erase(it->second);
    by_id_.erase(it);
  }

  // Runs every event due up to `until_us`, in order, then sets the clock to it.
  void RunUntil(int64_t until_us) {
    while (!queue_.empty() && queue_.begin()->first.first <= until_us) {
      auto it = queue_.begin();
      now_us_ = it->first.first;
      std::function<void()> fn = std::move(it->second);
      by_id_.erase(it->first.second);
      queue_.erase(it);
      fn();
    }
    now_us_ = std::max(now_us_, until_us);
  }
  void RunFor(int64_t us) { RunUntil(now_us_ + us); }

 private:
  using Queue = std::map<std::pair<int64_t, uint64_t>, std::function<void()>>;
  int64_t now_us_;
  uint64_t next_id_ = 1;
  Queue queue_;
  std::unordered_map<uint64_t, Queue::iterator> by_id_;
};

// A node's clock that is the simulation's clock.
class SimClock final : public Clock {
 public:
  explicit SimClock(const SimScheduler& s) : s_(s) {}
  int64_t NowMs() const override { return s_.NowUs() / 1000; }
  // A fixed epoch plus the simulated time: a seeded run repeats exactly.
  int64_t WallMs() const override { return ManualClock::kWallStartMs + NowMs(); }

 private:
  const SimScheduler& s_;
};

}  // namespace limiter::sim
