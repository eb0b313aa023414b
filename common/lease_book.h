// LeaseBook: what a node remembers of the leases it granted on one key, so that a RETURN
// gives back only units that are outstanding, and only as much of their charge as still has
// an effect: the key then ends exactly as if the returned units had never been charged.
//
// Why more than a count. A charge stops having an effect as the key forgets it: a bucket
// that was full at any moment since a grant has forgotten the grant entirely, one that came
// within 3 tokens of full has forgotten all but 3. So the book keeps, for each grant, the
// least charge in effect (KeyLimiter::InEffect) from that grant until the next one: `low`,
// the minimum of its segment of the key's history. The least charge in effect since grant
// k, min(low_j for j >= k), is what of lease k can still come back, and a return of g
// charge units makes the key as if lease k had charged g less from the start: every
// segment since grant k then had g less in effect (low_j -= g for j >= k). The key stays
// exactly as if every returned unit had never been charged, whatever the order of grants,
// returns and admissions. The least value of a segment is the one just before an admission
// or grant (the charge in effect only falls as time passes), so the node clamps the last
// segment then, and before a return. One return per lease: a replay gets nothing.
//
// Bounded: at most kMaxRecords grants per key, inline (the oldest is forgotten first: its
// units simply lapse, and no later lease needs its segment); records lapse with their
// lease's TTL, dropped as new grants come. Charges are in the algorithm's charge units
// (KeyLimiter::ChargeScale). A value type; the store keeps one beside its key's state, in
// the key's stripe, and drops it with the key.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "limiter/status.h"

namespace limiter {

class LeaseBook {
 public:
  static constexpr size_t kMaxRecords = 4;

  struct Record {
    uint64_t lease_id = 0;
    int64_t granted_at_ms = 0;
    int64_t expires_ms = 0;
    int64_t units = 0;  // granted
    int64_t low = 0;    // the least charge in effect from this grant to the next
    bool returned = false;
  };

  bool empty() const { return size_ == 0; }
  std::span<const Record> records() const { return {records_.data(), size_}; }

  // The key's charge in effect now; call before every admission, grant and refund.
  void Clamp(int64_t in_effect);
  // A grant of `units` at now_ms, lapsing at expires_ms, after which `in_effect` is in
  // effect (Clamp was called with what was in effect just before it was charged). Lapsed
  // records go first.
  void Grant(uint64_t lease_id, int64_t now_ms, int64_t expires_ms, int64_t units,
             int64_t in_effect);
  // How many charge units a return of `units` of lease `lease_id` may give back (`scale`
  // charge units a unit); an error (naming the lease) when it is not outstanding here or
  // claims more than it granted.
  Result<int64_t> Claim(uint64_t lease_id, int64_t leased_at_ms, int64_t units, int64_t scale,
                        int64_t now_ms) const;
  // After the refund of `given` charge units for the lease: it is closed.
  void Settle(uint64_t lease_id, int64_t given);
  // Drops lapsed records; true when nothing is left.
  bool Expire(int64_t now_ms);

 private:
  void DropFront(size_t n);
  std::array<Record, kMaxRecords> records_;  // oldest first
  size_t size_ = 0;
};

}  // namespace limiter
