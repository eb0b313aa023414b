// Sliding log: remembers every admitted cost in the last window; exact, at the price of up to
// min(L, W) entries per key (fewer when requests share a millisecond or cost more than one):
// entries have distinct milliseconds inside one window of W ms, and each holds a cost of at
// least 1 out of a total of at most L.
//
// The entries sit in a ring buffer whose capacity (a power of two) changes only when a push
// finds it full, or when its owner asks (Entries::Reallocate); the node's store uses that to
// count a log's memory against its key bound (store.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/limit_decision.h"
#include "common/rate.h"

namespace limiter {

// Admit iff (admitted cost in (now-W, now]) + cost <= L. Same preconditions and functions as
// the algorithms in algorithms.h.
struct SlidingLog {
  struct Entry {
    int64_t t_ms;
    int64_t cost;  // admitted cost at t_ms, merged per millisecond
  };

  // A ring buffer of entries, oldest first. A value type.
  class Entries {
   public:
    static constexpr size_t kMinCapacity = 2;

    Entries() = default;
    Entries(const Entries& other);
    Entries& operator=(const Entries& other);
    Entries(Entries&& other) noexcept;
    Entries& operator=(Entries&& other) noexcept;
    ~Entries() = default;

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    size_t capacity() const { return capacity_; }

    const Entry& operator[](size_t i) const { return buf_[(head_ + i) & (capacity_ - 1)]; }
    Entry& operator[](size_t i) { return buf_[(head_ + i) & (capacity_ - 1)]; }
    const Entry& front() const { return (*this)[0]; }
    const Entry& back() const { return (*this)[size_ - 1]; }
    Entry& back() { return (*this)[size_ - 1]; }

    // Doubles the capacity (to at least kMinCapacity) when full.
    void push_back(const Entry& e) {
      if (size_ == capacity_) Grow();
      ++size_;
      back() = e;
    }
    void pop_front() {
      head_ = (head_ + 1) & (capacity_ - 1);
      --size_;
    }
    void erase(size_t i);  // keeps the order
    // Moves the entries to a buffer of `capacity`: a power of two, at least size(); 0 frees
    // the buffer of an empty log.
    void Reallocate(size_t capacity);

   private:
    void Grow();

    std::unique_ptr<Entry[]> buf_;
    size_t head_ = 0;
    size_t size_ = 0;
    size_t capacity_ = 0;
  };

  struct State {
    Entries entries;      // oldest first, all within (now-W, now]
    int64_t total = 0;    // sum of entries[].cost
    int64_t seen_ms = 0;  // the latest time the log was moved to (entries dropped)
  };

  // The most entries a log of `rate` can hold: min(L, W).
  static int64_t MaxEntries(const Rate& rate);

  static LimitDecision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
  // What Decide would answer, changing nothing (and copying nothing).
  static LimitDecision Peek(const Rate& rate, const State& state, int64_t now_ms, int64_t cost);
  // Moves the log to now: drops the entries that left the window, as Decide does first. Changes
  // no later decision; afterwards one Decide adds at most one entry.
  static void Advance(const Rate& rate, State& state, int64_t now_ms);
  static bool IsFresh(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t InEffect(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t Refund(const Rate& rate, State& state, int64_t now_ms, int64_t amount,
                        int64_t charged_at_ms);
};

}  // namespace limiter
