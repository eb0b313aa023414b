#include "common/lease_book.h"

#include <algorithm>

namespace limiter {

void LeaseBook::Clamp(int64_t in_effect) {
  if (size_ > 0) records_[size_ - 1].low = std::min(records_[size_ - 1].low, in_effect);
}

void LeaseBook::DropFront(size_t n) {
  std::move(records_.begin() + n, records_.begin() + size_, records_.begin());
  size_ -= n;
}

void LeaseBook::Grant(uint64_t lease_id, int64_t now_ms, int64_t expires_ms, int64_t units,
                      int64_t in_effect) {
  Expire(now_ms);
  if (size_ == kMaxRecords) DropFront(1);  // the oldest is forgotten: its units lapse
  records_[size_++] = {lease_id, now_ms, expires_ms, units, in_effect, false};
}

Result<int64_t> LeaseBook::Claim(uint64_t lease_id, int64_t leased_at_ms, int64_t units,
                                 int64_t scale, int64_t now_ms) const {
  const std::string name = "lease " + std::to_string(lease_id);
  const auto end = records_.begin() + size_;
  for (auto it = records_.begin(); it != end; ++it) {
    const Record& r = *it;
    if (r.lease_id != lease_id) continue;
    if (r.returned) return Error{name + " was returned already"};
    if (r.expires_ms < now_ms) return Error{name + " has lapsed (its TTL is over)"};
    if (r.granted_at_ms != leased_at_ms) {
      return Error{name + " was granted at " + std::to_string(r.granted_at_ms) + ", not at " +
                   std::to_string(leased_at_ms)};
    }
    if (units > r.units) {
      return Error{"returns " + std::to_string(units) + " units of " + name + ", which granted " +
                   std::to_string(r.units)};
    }
    // No more than it granted, so at most a burst: units * scale cannot overflow (Rate).
    int64_t least = units * scale;  // then the least charge in effect since the grant
    for (auto later = it; later != end; ++later) least = std::min(least, later->low);
    return least;
  }
  return Error{name +
               " is not outstanding on this node (never granted here, lapsed, or "
               "granted before the node restarted)"};
}

void LeaseBook::Settle(uint64_t lease_id, int64_t given) {
  bool since = false;
  for (size_t i = 0; i < size_; ++i) {
    Record& r = records_[i];
    if (r.lease_id == lease_id) {
      since = true;
      r.returned = true;
    }
    if (since) r.low -= given;
  }
}

bool LeaseBook::Expire(int64_t now_ms) {
  size_t lapsed = 0;
  while (lapsed < size_ && records_[lapsed].expires_ms < now_ms) ++lapsed;
  if (lapsed > 0) DropFront(lapsed);
  return size_ == 0;
}

}  // namespace limiter
