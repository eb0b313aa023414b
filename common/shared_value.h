// SharedValue<T>: a shared_ptr that many threads read and a few replace, copied under a mutex.
//
// Not std::atomic<std::shared_ptr>: libstdc++ 12's load() releases its internal lock with a
// relaxed store, so a load and a later store of the same atomic are not ordered by the memory
// model (ThreadSanitizer reports it as the data race it formally is). A copy under a mutex is
// a few tens of nanoseconds, once per frame.
#pragma once

#include <memory>
#include <utility>

#include "common/mutex.h"

namespace limiter {

template <class T>
class SharedValue {
 public:
  SharedValue() = default;
  explicit SharedValue(std::shared_ptr<T> value) : value_(std::move(value)) {}
  SharedValue(const SharedValue&) = delete;
  SharedValue& operator=(const SharedValue&) = delete;

  std::shared_ptr<T> load() const {
    MutexLock lock(mu_);
    return value_;
  }
  // The value replaced is released after the lock is let go.
  void store(std::shared_ptr<T> value) {
    std::shared_ptr<T> old;
    {
      MutexLock lock(mu_);
      old = std::exchange(value_, std::move(value));
    }
  }

 private:
  mutable Mutex mu_;
  std::shared_ptr<T> value_ LIMITER_GUARDED_BY(mu_);
};

}  // namespace limiter
