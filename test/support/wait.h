// WaitUntil: the tests' one way to wait for another thread or process to get somewhere.
// It polls a predicate until it holds or a timeout passes and says which; the caller asserts
// on the outcome it waited for, never on how long that took. Timeouts are generous upper
// bounds (a loaded machine, a sanitized build), not expectations. Thread-safety: as safe as
// the predicate.
#pragma once

#include <chrono>
#include <thread>

namespace limiter::testing {

// Asks `done` every `poll` until it returns true (true) or `timeout` has passed (false). It
// is asked at least once, and once more after the last sleep.
template <class Predicate>
bool WaitUntil(Predicate&& done, std::chrono::milliseconds timeout = std::chrono::seconds(20),
               std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  for (const auto give_up = std::chrono::steady_clock::now() + timeout;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace limiter::testing
