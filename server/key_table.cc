#include "server/key_table.h"

#include <string>
#include <utility>

#include "limiter/status.h"

namespace limiter {
namespace {

constexpr size_t kInitialCapacity = 8;
// Grow when size would pass 4/5 of capacity; grow by 5/4.
bool OverLoaded(size_t size, size_t capacity) { return size * 5 > capacity * 4; }

}  // namespace

KeyTable& KeyTable::operator=(KeyTable&& other) noexcept {
  slots_ = std::move(other.slots_);
  capacity_ = std::exchange(other.capacity_, 0);
  size_ = std::exchange(other.size_, 0);
  PublishHint();
  other.PublishHint();
  return *this;
}

void KeyTable::PublishHint() {
  hint_base_.store(reinterpret_cast<uintptr_t>(slots_.get()), std::memory_order_relaxed);
  hint_capacity_.store(capacity_, std::memory_order_relaxed);
}

Slot* KeyTable::Find(const KeyId& id) {
  if (size_ == 0) return nullptr;
  for (size_t i = Home(id);; i = i + 1 == capacity_ ? 0 : i + 1) {
    Slot& s = slots_[i];
    if (s.id == id) return &s;
    if (Empty(s)) return nullptr;
  }
}

Slot* KeyTable::Insert(const KeyId& id) {
  if (capacity_ == 0 || OverLoaded(size_ + 1, capacity_)) Grow();
  for (size_t i = Home(id);; i = i + 1 == capacity_ ? 0 : i + 1) {
    Slot& s = slots_[i];
    if (Empty(s)) {
      s.id = id;
      s.state = {};
      ++size_;
      return &s;
    }
  }
}

void KeyTable::Erase(Slot* slot) {
  size_t hole = static_cast<size_t>(slot - slots_.get());
  // Backward-shift: pull later members of the cluster into the hole when their home allows.
  for (size_t j = hole;;) {
    j = j + 1 == capacity_ ? 0 : j + 1;
    Slot& s = slots_[j];
    if (Empty(s)) break;
    const size_t home = Home(s.id);
    const bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
    if (movable) {
      slots_[hole] = s;
      hole = j;
    }
  }
  slots_[hole] = Slot{};
  --size_;
}

void KeyTable::Grow() {
  const size_t capacity = capacity_ == 0 ? kInitialCapacity : capacity_ + capacity_ / 4;
  // calloc: zeroed slots are empty, and untouched pages cost no resident memory.
  std::unique_ptr<Slot[], Free> old(static_cast<Slot*>(std::calloc(capacity, sizeof(Slot))));
  // Not an exception on the request path: the node cannot go on without the table.
  LIMITER_CHECK(old != nullptr,
                "out of memory growing a key table to " + std::to_string(capacity) + " slots");
  old.swap(slots_);
  const size_t old_capacity = capacity_;
  capacity_ = capacity;
  PublishHint();
  for (size_t i = 0; i < old_capacity; ++i) {
    const Slot& s = old[i];
    if (Empty(s)) continue;
    size_t j = Home(s.id);
    while (!Empty(slots_[j])) j = j + 1 == capacity_ ? 0 : j + 1;
    slots_[j] = s;
  }
}

}  // namespace limiter
