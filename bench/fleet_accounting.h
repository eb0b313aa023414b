// What a fleet run's decisions prove, shared by `limiter-bench cluster` and `limiter-bench
// sim`: the store-op floor (how few store calls any client could have made for the arrivals
// that happened) and the accuracy check against I1, with decisions that involved a fallback
// kept apart from those that did not, in charge time and in real admission time.
// Pure arithmetic over a list of decisions; no I/O, no clock.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/cluster_workload.h"
#include "common/promise_check.h"
#include "limiter/status.h"

namespace limiter {
class PolicySet;
}

namespace limiter::bench {

// One decision as the harness saw it. 40 bytes: a 500k run keeps millions of them.
struct DecisionRecord {
  int64_t intended_us = 0;  // the arrival
  int64_t done_us = 0;      // the decision
  uint32_t index = 0;       // key rank (kApiKey) or account rank (kLogin)
  uint16_t gateway = 0;
  uint8_t kind = kApiKey;  // Kind
  uint8_t source = 0;      // client::Source
  int32_t cost = 1;
  int32_t retry_after_ms = 0;  // a denial's, capped; kRetryNever is INT32_MAX
  // Flags as bytes (0 or 1): records are read back from files, where a bool's other values
  // would be undefined.
  uint8_t allowed = 0;
  uint8_t error = 0;
  uint8_t checked = 0;   // a CHECK however it is decided: strict, or a lease cannot pay it
  uint8_t measured = 0;  // arrived after the warm-up: counted in the floor
  uint8_t pad[4] = {};   // no uninitialised bytes in a record file
};
static_assert(sizeof(DecisionRecord) == 40, "records are written to files as they are");

// Ok, or what is wrong with a record (a kind, source, flag or index out of range, a cost
// below 1, a decision before its arrival). `keys_of_kind` bounds the index per kind.
Status CheckRecord(const DecisionRecord& r, const std::array<size_t, kKinds>& keys_of_kind);

// The worst window over every interval [a, b], counting the admissions whose whole span lies
// in it. Exact whatever order the spans' starts come in: a leased unit's span reaches a TTL
// back, so starts are not in the order of ends, which FindWorstWindow
// (common/promise_check.h) assumes. O(n log n); sorts `spans` by end.
WorstWindow ExactWorstWindow(std::vector<Admission>& spans, const PromiseBound& bound);

// What the accounting needs of each kind's policy (and the fleet).
struct KindLimits {
  std::string policy;
  std::string limit_class;  // security, contract, billing, capacity
  int class_index = 0;      // LimitClass order
  int64_t limit = 1, window_us = 1, burst = 1;
  bool strict = false;      // one CHECK per request: no leases
  int64_t lease_units = 1;  // the policy's lease size
  int64_t lease_ttl_us = 1'000'000;
  // How long before its arrival a unit a gateway spends may have been charged: a TTL, plus
  // the reply's way back (a lease lapses a TTL after the gateway got it; at most its deadline).
  int64_t charge_lead_us = 1'000'000;
  // The fallback a gateway applies while the owner is away, per gateway: contract's L/N
  // bucket (burst B/N), security's local limit. fallback_limit 0: no local admissions
  // allowed (security without a local limit denies); -1: unbounded (billing fails open).
  int64_t fallback_limit = 0, fallback_window_us = 1, fallback_burst = 0;
};

// The limits of api_key and login from the scenario's policy file, for `gateways` gateways
// whose store calls have `deadline_us`; an error when the file lacks one of them.
Result<std::vector<KindLimits>> LimitsOf(const PolicySet& policies, int gateways,
                                         int64_t deadline_us);

// The store-op floor for `records` with intended_us >= from_us (see fleet_accounting.cc),
// by what each op was for.
struct StoreOpFloorResult {
  uint64_t leases = 0;   // admissions of lease-mode policies
  uint64_t checks = 0;   // admissions of strict policies
  uint64_t denials = 0;  // denial periods
  uint64_t total() const { return leases + checks + denials; }
};
StoreOpFloorResult StoreOpFloor(const std::vector<DecisionRecord>& records,
                                const std::vector<KindLimits>& limits);

struct WorstKey {
  bool found = false;
  std::string policy, key, limit_class;
  int64_t admitted = 0;
  double interval_ms = 0, allowed = 0, excess = 0;  // excess = admitted - allowed
  bool within_allowance = true;                     // keys with a fallback only
};

struct Accuracy {
  uint64_t keys_checked = 0;
  // Keys with no fallback admission, checked in charge time against B + L·t/W: must be 0.
  uint64_t keys_over_promise = 0;
  WorstKey worst;  // closest to (or furthest over) the promise, without fallback
  // Keys with at least one fallback admission (or a reset owner), against B + L·t/W, and
  // against the class's allowance: the promise plus each falling-back gateway's local bucket,
  // plus a burst per reset.
  uint64_t keys_with_fallback = 0;
  uint64_t keys_over_promise_with_fallback = 0;
  uint64_t keys_over_allowance = 0;
  WorstKey worst_with_fallback;
  // Units admitted by a fallback, by the class of the key's policy (security must stay 0
  // where no local limit is configured).
  std::array<uint64_t, 4> fallback_units_by_class{};
  // Real admission time (a leased unit counts when it is spent): keys without fallback over
  // B + L·t/W, and over B + g·S + L·t/W (g gateways that spent leases of the key, S units each:
  // the most that can be outstanding), which must be 0.
  uint64_t keys_over_promise_real_time = 0;
  uint64_t keys_over_real_time_bound = 0;
  WorstKey worst_real_time;
};

// `resets`, when given: per kind and key rank, how many times the key's owner lost its state
// (killed and restarted empty). Such a key is judged with the fallback keys, its allowance one
// more burst per reset (the crash promise).
Accuracy CheckAccuracy(const std::vector<DecisionRecord>& records,
                       const std::vector<KindLimits>& limits, const Workload& workload,
                       const std::vector<std::vector<uint16_t>>* resets = nullptr);

}  // namespace limiter::bench
