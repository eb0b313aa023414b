#include "common/lease_book.h"

#include <algorithm>

namespace limiter {

void LeaseBook::Clamp(int64_t in_effect) {
  if (!records_.empty()) records_.back().low = std::min(records_.back().low, in_effect);
}

void LeaseBook::Grant(uint64_t lease_id, int64_t now_ms, int64_t expires_ms, int64_t units,
                      int64_t in_effect) {
  if (records_.size() == kMaxRecords) records_.erase(records_.begin());  // its units lapse
  records_.push_back({lease_id, now_ms, expires_ms, units, in_effect, false});
}

Result<int64_t> LeaseBook::Claim(uint64_t lease_id, int64_t leased_at_ms, int64_t units,
                                 int64_t scale, int64_t now_ms) const {
  const std::string name = "lease " + std::to_string(lease_id);
  for (auto it = records_.begin(); it != records_.end(); ++it) {
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
    for (auto later = it; later != records_.end(); ++later) least = std::min(least, later->low);
    return least;
  }
  return Error{name +
               " is not outstanding on this node (never granted here, lapsed, or "
               "granted before the node restarted)"};
}

void LeaseBook::Settle(uint64_t lease_id, int64_t given) {
  bool since = false;
  for (Record& r : records_) {
    if (r.lease_id == lease_id) {
      since = true;
      r.returned = true;
    }
    if (since) r.low -= given;
  }
}

bool LeaseBook::Expire(int64_t now_ms) {
  const auto lapsed = std::find_if(records_.begin(), records_.end(),
                                   [&](const Record& r) { return r.expires_ms >= now_ms; });
  records_.erase(records_.begin(), lapsed);
  return records_.empty();
}

}  // namespace limiter
