// AsioScheduler: the real Scheduler, an asio io_context run by one thread of its own, and a
// second thread, started on the first Offload, for the work that must not delay it.
// Thread-safe.
#pragma once

#include <memory>

#include "client/scheduler.h"

namespace asio {
class io_context;
}

namespace limiter {

class AsioScheduler final : public Scheduler {
 public:
  AsioScheduler();
  ~AsioScheduler() override;  // Stop()

  // Stops the thread; work still pending is dropped, never run. Idempotent.
  void Stop();

  int64_t NowUs() const override;
  int64_t NowCoarseUs() const override;  // CLOCK_MONOTONIC_COARSE
  void Post(std::function<void()> fn) override;
  uint64_t After(int64_t delay_us, std::function<void()> fn) override;
  void Cancel(uint64_t timer) override;
  void Offload(std::function<void()> fn) override;

  asio::io_context& io();
  // Runs fn on the thread and waits for it.
  void RunAndWait(std::function<void()> fn);
  // Runs fn on the thread as the last thing it does, then stops it (as Stop): no handler
  // runs after fn, so whatever fn shut down stays shut. For shutdown work.
  void RunAndStop(std::function<void()> fn);

 private:
  void StopBackground();

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace limiter
