#include "common/hot_key_sketch.h"

#include <algorithm>

namespace limiter {

HotKeySketch::HotKeySketch(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {
  entries_.reserve(capacity_);
  heap_.reserve(capacity_);
  position_.reserve(capacity_);
  index_.reserve(capacity_ * 2);
}

void HotKeySketch::Swap(size_t a, size_t b) {
  std::swap(heap_[a], heap_[b]);
  position_[heap_[a]] = a;
  position_[heap_[b]] = b;
}

void HotKeySketch::SiftDown(size_t pos) {
  const size_t n = heap_.size();
  while (true) {
    size_t smallest = pos;
    for (size_t child = 2 * pos + 1; child <= 2 * pos + 2 && child < n; ++child) {
      if (entries_[heap_[child]].weight() < entries_[heap_[smallest]].weight()) smallest = child;
    }
    if (smallest == pos) return;
    Swap(pos, smallest);
    pos = smallest;
  }
}

void HotKeySketch::Add(int policy, std::string_view key, uint64_t hash, uint64_t weight,
                       bool denied, uint16_t tag) {
  auto it = index_.find(hash);
  if (it != index_.end()) {
    Entry& e = entries_[it->second];
    e.current += weight;
    if (denied) e.denied_current += weight;
    SiftDown(position_[it->second]);  // heavier: it can only move down a min-heap
    return;
  }
  if (entries_.size() < capacity_) {
    const size_t i = entries_.size();
    entries_.push_back({policy, std::string(key), hash, tag, 0, weight, 0, 0, denied ? weight : 0});
    heap_.push_back(i);
    position_.push_back(heap_.size() - 1);
    index_.emplace(hash, i);
    // A new entry may be lighter than its parents: sift up.
    for (size_t pos = heap_.size() - 1; pos > 0;) {
      const size_t parent = (pos - 1) / 2;
      if (entries_[heap_[parent]].weight() <= entries_[heap_[pos]].weight()) break;
      Swap(pos, parent);
      pos = parent;
    }
    return;
  }
  // Take over the lightest counter: its count is an upper bound on this key's.
  const size_t i = heap_[0];
  Entry& e = entries_[i];
  index_.erase(e.hash);
  const uint64_t inherited = e.weight();
  e.policy = policy;
  e.key.assign(key.data(), key.size());
  e.hash = hash;
  e.tag = tag;
  e.error = inherited;
  e.last = 0;
  e.current = inherited + weight;
  e.denied_last = 0;
  e.denied_current = denied ? weight : 0;
  index_.emplace(hash, i);
  SiftDown(0);
}

void HotKeySketch::Roll() {
  for (Entry& e : entries_) {
    e.last = e.current;
    e.current = 0;
    e.denied_last = e.denied_current;
    e.denied_current = 0;
    e.error = std::min(e.error, e.last);
  }
  // Weights changed unevenly: rebuild the heap bottom up.
  for (size_t pos = heap_.size() / 2; pos-- > 0;) SiftDown(pos);
}

std::vector<HotKeySketch::Entry> HotKeySketch::Top(size_t n) const {
  std::vector<Entry> top = entries_;
  std::sort(top.begin(), top.end(), [](const Entry& a, const Entry& b) {
    return a.last != b.last ? a.last > b.last : a.current > b.current;
  });
  if (top.size() > n) top.resize(n);
  return top;
}

}  // namespace limiter
