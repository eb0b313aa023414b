// Mutex, MutexLock, SharedMutex and CondVar: std::mutex, std::shared_mutex and
// std::condition_variable with clang's thread-safety annotations, so that the compiler checks
// what each lock guards (LIMITER_GUARDED_BY on a member; the clang pass of ./dev.sh test
// builds every file with -Wthread-safety -Werror). The standard types carry no annotations,
// so clang cannot check them; these wrappers add nothing at run time.
//
//   Mutex mu_;
//   int64_t count_ LIMITER_GUARDED_BY(mu_) = 0;
//   void Add() LIMITER_EXCLUDES(mu_) { MutexLock lock(mu_); ++count_; }
//
// Thread-safety: as the standard types they wrap.
#pragma once

#include <absl/base/thread_annotations.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#define LIMITER_GUARDED_BY(x) ABSL_GUARDED_BY(x)
#define LIMITER_PT_GUARDED_BY(x) ABSL_PT_GUARDED_BY(x)
#define LIMITER_ACQUIRED_AFTER(...) ABSL_ACQUIRED_AFTER(__VA_ARGS__)
#define LIMITER_REQUIRES(...) ABSL_EXCLUSIVE_LOCKS_REQUIRED(__VA_ARGS__)
#define LIMITER_REQUIRES_SHARED(...) ABSL_SHARED_LOCKS_REQUIRED(__VA_ARGS__)
#define LIMITER_EXCLUDES(...) ABSL_LOCKS_EXCLUDED(__VA_ARGS__)
#define LIMITER_NO_THREAD_SAFETY_ANALYSIS ABSL_NO_THREAD_SAFETY_ANALYSIS

namespace limiter {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds it (a function called only under the lock that
  // the analysis cannot follow, such as a callback).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock and Lock let go of it and take it again within it.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.Lock();
    held_ = true;
  }

 private:
  friend class CondVar;
  Mutex& mu_;
  bool held_ = true;
};

class ABSL_LOCKABLE SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void LockShared() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void UnlockShared() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterLock() ABSL_UNLOCK_FUNCTION() { mu_.Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() ABSL_UNLOCK_FUNCTION() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// A condition variable over a Mutex held by a MutexLock. The waits return with it held.
class CondVar {
 public:
  void Wait(MutexLock& lock) {
    Do(lock, [&](auto& l) { cv_.wait(l); });
  }
  template <class Predicate>
  void Wait(MutexLock& lock, Predicate ready) {
    Do(lock, [&](auto& l) { cv_.wait(l, ready); });
  }
  // False when `ready` still does not hold after `timeout`.
  template <class Rep, class Period, class Predicate>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout, Predicate ready) {
    bool met = false;
    Do(lock, [&](auto& l) { met = cv_.wait_for(l, timeout, ready); });
    return met;
  }
  template <class Rep, class Period>
  void WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout) {
    Do(lock, [&](auto& l) { cv_.wait_for(l, timeout); });
  }
  template <class Clock, class Duration>
  void WaitUntil(MutexLock& lock, std::chrono::time_point<Clock, Duration> at) {
    Do(lock, [&](auto& l) { cv_.wait_until(l, at); });
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  // Runs `wait` on a unique_lock that adopts the locked std::mutex and gives it back after:
  // the MutexLock keeps owning it.
  template <class F>
  void Do(MutexLock& lock, F wait) {
    std::unique_lock<std::mutex> l(lock.mu_.mu_, std::adopt_lock);
    wait(l);
    l.release();
  }
  std::condition_variable cv_;
};

}  // namespace limiter
