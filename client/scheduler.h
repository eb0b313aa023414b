// The client's time and thread seam: what runs on its I/O thread, and when. The real one
// is an asio io_context on a thread of the client's (asio_scheduler.h); tests use a
// simulated one whose clock moves only when its queue says so (and which runs offloaded work
// on its one thread too, in order, so that simulations stay deterministic).
#pragma once

#include <cstdint>
#include <functional>

namespace limiter {

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Microseconds on a monotonic scale; safe from any thread.
  virtual int64_t NowUs() const = 0;
  // The same scale, cheaper to read and up to a few ms behind: for lease expiry on the
  // request path.
  virtual int64_t NowCoarseUs() const { return NowUs(); }
  // Runs fn on the scheduler's thread, soon. Safe from any thread.
  virtual void Post(std::function<void()> fn) = 0;
  // Runs fn on the scheduler's thread after delay_us. Safe from any thread. The id lets
  // Cancel stop it; cancelling a timer that has run (or an unknown id) does nothing.
  virtual uint64_t After(int64_t delay_us, std::function<void()> fn) = 0;
  virtual void Cancel(uint64_t timer) = 0;
  // Runs fn soon, but not on the scheduler's thread: work too slow for the thread that fires
  // the deadlines (building a ring). fn may Post its result back. Safe from any thread. Work
  // still pending when the scheduler stops is dropped, so fn must own what it touches.
  virtual void Offload(std::function<void()> fn) = 0;
};

}  // namespace limiter
