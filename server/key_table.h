// KeyTable: one policy's keys in one stripe of the store. Open addressing with linear
// probing and backward-shift deletion, 32 bytes a slot (a 128-bit key hash and 16 bytes of
// algorithm state), any capacity (fast range reduction instead of a power of two) so that it
// can grow by 1.25x and keep the load between 0.64 and 0.8: under 64 bytes a key.
//
// Not thread-safe: the Store guards each table with its stripe's mutex; only Prefetch may be
// called from any thread without it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "protocol/key_id.h"

namespace limiter {

struct Slot {
  KeyId id;
  alignas(8) std::array<std::byte, 16> state;
};
static_assert(sizeof(Slot) == 32);

class KeyTable {
 public:
  KeyTable() = default;
  KeyTable(KeyTable&& other) noexcept { *this = std::move(other); }
  KeyTable& operator=(KeyTable&& other) noexcept;

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  size_t bytes() const { return capacity_ * sizeof(Slot); }

  Slot* Find(const KeyId& id);
  // A hint: starts loading the line where Find(id) would begin, so that a lookup a little
  // later does not wait for memory. Safe without the lock: it reads where the slots are
  // through relaxed atomics, and one that races a Grow only prefetches a stale address (a
  // prefetch never faults).
  void Prefetch(const KeyId& id) const {
    const size_t capacity = hint_capacity_.load(std::memory_order_relaxed);
    const uintptr_t base = hint_base_.load(std::memory_order_relaxed);
    if (capacity == 0 || base == 0) return;
    __builtin_prefetch(reinterpret_cast<const void*>(base + HomeIn(id, capacity) * sizeof(Slot)));
  }
  // Adds `id`, which must be absent, with a zeroed state. May grow the table, which moves
  // every slot: pointers from earlier Find calls are invalid afterwards.
  Slot* Insert(const KeyId& id);
  // Removes the slot; pointers to later slots of its cluster are invalid afterwards.
  void Erase(Slot* slot);

  // Looks at up to `budget` slots from *cursor on (wrapping) and erases those for which
  // expired(slot) is true. Returns how many it erased.
  template <class Expired>
  size_t Sweep(size_t* cursor, size_t budget, Expired expired);

  template <class F>
  void ForEach(F f) {
    for (size_t i = 0; i < capacity_; ++i) {
      if (!Empty(slots_[i])) f(slots_[i]);
    }
  }

 private:
  struct Free {
    void operator()(Slot* p) const { std::free(p); }
  };
  static bool Empty(const Slot& s) { return (s.id.lo | s.id.hi) == 0; }
  static size_t HomeIn(const KeyId& id, size_t capacity) {
    return static_cast<size_t>((static_cast<unsigned __int128>(id.lo) * capacity) >> 64);
  }
  size_t Home(const KeyId& id) const { return HomeIn(id, capacity_); }
  void Grow();
  void PublishHint();

  std::unique_ptr<Slot[], Free> slots_;
  size_t capacity_ = 0;
  size_t size_ = 0;
  // slots_ and capacity_ again, for Prefetch on other threads.
  std::atomic<uintptr_t> hint_base_{0};
  std::atomic<size_t> hint_capacity_{0};
};

template <class Expired>
size_t KeyTable::Sweep(size_t* cursor, size_t budget, Expired expired) {
  size_t erased = 0;
  if (capacity_ == 0) return 0;
  budget = budget < capacity_ ? budget : capacity_;
  for (size_t n = 0; n < budget; ++n) {
    size_t i = *cursor % capacity_;
    *cursor = i + 1;
    // Erasing shifts a later slot into i; look at i again so nothing is skipped.
    while (!Empty(slots_[i]) && expired(slots_[i])) {
      Erase(&slots_[i]);
      ++erased;
    }
  }
  return erased;
}

}  // namespace limiter
