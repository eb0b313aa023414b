// The policy model: what a limit promises, how gateways spend it, and how it fails.
// Policies live on the server side, in one YAML file shared by nodes and gateways
// (see policy_file.h). A PolicySet is immutable once loaded and safe to share across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/algorithm_kind.h"
#include "common/rate.h"

namespace limiter {

class Calendar;  // common/calendar.h

// The class of a limit decides what happens when its store is unreachable (docs/design.md).
enum class LimitClass : uint8_t { kSecurity, kContract, kBilling, kCapacity };
std::string_view LimitClassName(LimitClass c);
std::optional<LimitClass> ParseLimitClass(std::string_view name);

// lease: gateways take batches of units and spend them locally (default, except security).
// strict: one CHECK per request (security limits such as login; multi-limit atomic checks).
enum class LeaseMode : uint8_t { kLease, kStrict };
std::string_view LeaseModeName(LeaseMode m);

// region: enforced by the region's cluster. global: one limit split across regions in
// proportion to recent demand.
enum class Scope : uint8_t { kRegion, kGlobal };
std::string_view ScopeName(Scope s);

struct LeaseSettings {
  int64_t size = 0;       // units per lease; 0 = derived from the rate by the client
  int64_t ttl_ms = 1000;  // unspent leased units lapse after this
};

// What a gateway does while the owner of a key misses its deadline. Which fields apply
// depends on the class; the loader rejects fields that do not.
struct Fallback {
  // security: the strict local limit each gateway enforces; none means deny everything.
  std::optional<Rate> local_rate;
  // contract: a local bucket at the full L instead of L/N (N gateways): brief overshoot.
  bool allow_overshoot = false;
  // capacity: the local shedder. billing has no settings: it fails open and reconciles.
  int64_t max_concurrency = 0;
  int64_t max_queue = 0;
  int64_t queue_timeout_ms = 10;
};

struct Policy {
  std::string name;
  Algorithm algorithm = Algorithm::kGcra;
  Rate rate;
  LimitClass limit_class = LimitClass::kContract;
  std::string parent;                                  // empty: none
  int parent_index = -1;                               // index in PolicySet::policies(), or -1
  std::vector<std::pair<std::string, int64_t>> costs;  // operation -> cost
  LeaseMode mode = LeaseMode::kLease;
  LeaseSettings lease;
  Fallback fallback;
  bool durable = false;  // persisted (RocksDB) when the node is built with it
  // Key units (server/store.h) this policy may hold on each node, and has reserved there; 0:
  // none given, so the policy shares the node's max_keys with the others.
  int64_t max_keys = 0;
  Scope scope = Scope::kRegion;
  // align: calendar (fixed_window only): windows follow this calendar, and rate.window_ms() is
  // its nominal window; null otherwise.
  std::shared_ptr<const Calendar> calendar;
  int line = 0;  // 1-based line of its definition, for messages

  // The cost of an operation; operations not listed cost 1.
  int64_t CostOf(std::string_view operation) const;
  // lease.size when set; else a fifth of the rate per second, at least 1 and at most the
  // burst (20 for 100/s).
  int64_t LeaseSize() const;
};

class PolicySet {
 public:
  PolicySet() = default;
  // Precondition: names unique, parent_index resolved and acyclic (the loader ensures it).
  PolicySet(std::string source, std::vector<Policy> policies)
      : source_(std::move(source)), policies_(std::move(policies)) {}

  const std::string& source() const { return source_; }  // file name it came from
  const std::vector<Policy>& policies() const { return policies_; }
  const Policy* Find(std::string_view name) const;
  // The policy followed by its ancestors, nearest first.
  std::vector<const Policy*> Chain(const Policy& policy) const;
  // Its parent, or nullptr: walks the chain without making it.
  const Policy* Parent(const Policy& policy) const {
    return policy.parent_index < 0 ? nullptr : &policies_[static_cast<size_t>(policy.parent_index)];
  }
  // Whether a lease of `policy` can stand in for requests of `operation` (empty: a plain
  // cost): every limit of the chain is in lease mode and charges them alike (a lease charges
  // the same units to every limit).
  bool LeasesAlike(const Policy& policy, std::string_view operation) const;

 private:
  std::string source_;
  std::vector<Policy> policies_;
};

}  // namespace limiter
