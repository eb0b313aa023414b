#include "bench/fleet_accounting.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "common/policy.h"
#include "common/promise_check.h"
#include "limiter/client/client.h"

namespace limiter::bench {
namespace {

constexpr auto kLease = static_cast<uint8_t>(client::Source::kLease);
constexpr auto kFallback = static_cast<uint8_t>(client::Source::kFallback);

// Record indices ordered by `less`.
template <typename Less>
std::vector<uint32_t> Order(const std::vector<DecisionRecord>& records, Less less) {
  std::vector<uint32_t> order(records.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return less(records[a], records[b]); });
  return order;
}

bool SameKey(const DecisionRecord& a, const DecisionRecord& b) {
  return a.kind == b.kind && a.index == b.index;
}

void Consider(WorstKey& worst, const WorstWindow& w, const KindLimits& k, const std::string& key,
              bool within_allowance) {
  const double excess = static_cast<double>(w.admitted) - w.allowed;
  if (worst.found && excess <= worst.excess) return;
  worst.found = true;
  worst.policy = k.policy;
  worst.key = key;
  worst.limit_class = k.limit_class;
  worst.admitted = w.admitted;
  worst.interval_ms = static_cast<double>(w.interval_us) / 1000;
  worst.allowed = w.allowed;
  worst.excess = excess;
  worst.within_allowance = within_allowance;
}

// Max over a range of values with range adds: f(r) for r over admissions ranked by end.
class MaxTree {
 public:
  explicit MaxTree(const std::vector<__int128>& base)
      : n_(base.size()), max_(4 * n_), add_(4 * n_) {
    Build(1, 0, n_ - 1, base);
  }
  // Adds v to f(r) for r in [from, to].
  void Add(size_t from, size_t to, __int128 v) { Add(1, 0, n_ - 1, from, to, v); }
  std::pair<__int128, size_t> Max() const { return ArgMax(1, 0, n_ - 1); }

 private:
  void Build(size_t node, size_t lo, size_t hi, const std::vector<__int128>& base) {
    if (lo == hi) {
      max_[node] = base[lo];
      return;
    }
    const size_t mid = (lo + hi) / 2;
    Build(2 * node, lo, mid, base);
    Build(2 * node + 1, mid + 1, hi, base);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]);
  }
  void Add(size_t node, size_t lo, size_t hi, size_t from, size_t to, __int128 v) {
    if (hi < from || lo > to) return;
    if (lo >= from && hi <= to) {
      max_[node] += v;
      add_[node] += v;
      return;
    }
    const size_t mid = (lo + hi) / 2;
    Add(2 * node, lo, mid, from, to, v);
    Add(2 * node + 1, mid + 1, hi, from, to, v);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + add_[node];
  }
  std::pair<__int128, size_t> ArgMax(size_t node, size_t lo, size_t hi) const {
    if (lo == hi) return {max_[node], lo};
    const size_t mid = (lo + hi) / 2;
    const bool left = max_[2 * node] >= max_[2 * node + 1];
    auto [v, at] = left ? ArgMax(2 * node, lo, mid) : ArgMax(2 * node + 1, mid + 1, hi);
    return {v + add_[node], at};
  }

  size_t n_;
  std::vector<__int128> max_, add_;
};

}  // namespace

// Each candidate start a, latest first, adds the admissions starting at or after it; a tree over
// the ends holds W·(cost ending by b) - L·b, so the best b is its maximum. Only the ends of
// added admissions may close a window (one ending before a would score its negative length):
// the others sit a huge amount below until their admission is added.
WorstWindow ExactWorstWindow(std::vector<Admission>& spans, const PromiseBound& bound) {
  WorstWindow result;
  if (spans.empty()) return result;
  using Wide = __int128;
  const size_t n = spans.size();
  std::sort(spans.begin(), spans.end(),
            [](const Admission& x, const Admission& y) { return x.end_us < y.end_us; });
  const Wide kAbsent = Wide{1} << 100;
  std::vector<Wide> base(n);
  for (size_t r = 0; r < n; ++r) base[r] = -Wide{bound.limit} * spans[r].end_us - kAbsent;
  MaxTree tree(base);
  std::vector<uint32_t> by_start(n);
  std::iota(by_start.begin(), by_start.end(), 0u);
  std::sort(by_start.begin(), by_start.end(),
            [&](uint32_t x, uint32_t y) { return spans[x].start_us > spans[y].start_us; });
  const Wide w = bound.window_us;
  Wide worst = 0;
  bool have = false;
  int64_t best_a = 0;
  size_t best_b = 0;
  for (size_t i = 0; i < n;) {
    const int64_t a = spans[by_start[i]].start_us;
    for (; i < n && spans[by_start[i]].start_us == a; ++i) {
      const size_t r = by_start[i];
      tree.Add(r, n - 1, Wide{spans[r].cost} * w);
      tree.Add(r, r, kAbsent);
    }
    auto [m, at] = tree.Max();
    const Wide score = m + Wide{bound.limit} * (a - bound.resolution_us);
    if (!have || score > worst) {
      have = true;
      worst = score;
      best_a = a;
      best_b = at;
    }
  }
  const int64_t b = spans[best_b].end_us;
  for (const Admission& x : spans) {
    if (x.start_us >= best_a && x.end_us <= b) result.admitted += x.cost;
  }
  result.interval_us = b - best_a + bound.resolution_us;
  result.over = worst > Wide{bound.burst} * w;
  result.allowed = static_cast<double>(bound.burst) + static_cast<double>(bound.limit) *
                                                          static_cast<double>(result.interval_us) /
                                                          static_cast<double>(bound.window_us);
  return result;
}

Status CheckRecord(const DecisionRecord& r, const std::array<size_t, kKinds>& keys_of_kind) {
  if (r.kind >= kKinds) return Error{"kind " + std::to_string(r.kind) + " (0 or 1)"};
  if (r.index >= keys_of_kind[r.kind]) {
    return Error{"key rank " + std::to_string(r.index) + " of " +
                 std::to_string(keys_of_kind[r.kind])};
  }
  if (r.source > kFallback) return Error{"source " + std::to_string(r.source) + " (0 to 2)"};
  if (r.allowed > 1 || r.error > 1 || r.checked > 1 || r.measured > 1) {
    return Error{"a flag not 0 or 1"};
  }
  if (r.cost < 1) return Error{"cost " + std::to_string(r.cost)};
  if (r.done_us < r.intended_us) return Error{"a decision before its arrival"};
  return Status::Ok();
}

Result<std::vector<KindLimits>> LimitsOf(const PolicySet& policies, int gateways,
                                         int64_t deadline_us) {
  std::vector<KindLimits> out;
  const int64_t n = std::max(1, gateways);
  for (int k = 0; k < kKinds; ++k) {
    const Policy* p = policies.Find(KindPolicy(static_cast<Kind>(k)));
    if (p == nullptr) {
      return Error{policies.source() + " has no policy '" + KindPolicy(static_cast<Kind>(k)) + "'"};
    }
    KindLimits l;
    l.policy = p->name;
    l.limit_class = std::string(LimitClassName(p->limit_class));
    l.class_index = static_cast<int>(p->limit_class);
    l.limit = p->rate.limit();
    l.window_us = p->rate.window_ms() * 1000;
    l.burst = p->rate.burst();
    l.strict = p->mode == LeaseMode::kStrict;
    l.lease_units = p->LeaseSize();
    l.lease_ttl_us = p->lease.ttl_ms * 1000;
    l.charge_lead_us = l.lease_ttl_us + std::max<int64_t>(0, deadline_us);
    switch (p->limit_class) {
      case LimitClass::kContract:
        // client/fallbacks.cc: L per N·W with burst B/N, or the full L when overshoot is
        // allowed.
        l.fallback_limit = p->rate.limit();
        l.fallback_window_us = l.window_us * (p->fallback.allow_overshoot ? 1 : n);
        l.fallback_burst = p->fallback.allow_overshoot ? p->rate.burst()
                                                       : std::max<int64_t>(1, p->rate.burst() / n);
        break;
      case LimitClass::kSecurity:
        if (p->fallback.local_rate) {
          l.fallback_limit = p->fallback.local_rate->limit();
          l.fallback_window_us = p->fallback.local_rate->window_ms() * 1000;
          l.fallback_burst = p->fallback.local_rate->burst();
        }
        break;
      case LimitClass::kBilling:
      case LimitClass::kCapacity:
        l.fallback_limit = -1;
        break;
    }
    out.push_back(l);
  }
  return out;
}

// The clairvoyant client, per (gateway, key) stream in arrival order:
// - an admission starts a lease (one store op) unless the lease in hand was answered less than
//   a TTL ago and still has units for it; a lease holds the policy's lease size (or the
//   request's cost, when larger);
// - a strict policy's admission is one CHECK each, and so is one of an operation a lease
//   cannot pay (its cost differs between the limits of the chain);
// - a denial needs one store answer, and covers the stream's denials until its retry_after;
//   an admission ends that. A denial period right after a lease costs nothing: that lease's
//   reply could have said when the key runs out (so could a reply that denied others at the
//   same moment).
// Decisions by fallback and errors were no store call's to make and are left out. So the
// floor is what the arrivals needed under the TTL and lease size in force, whatever the
// client did.
StoreOpFloorResult StoreOpFloor(const std::vector<DecisionRecord>& records,
                                const std::vector<KindLimits>& limits) {
  const std::vector<uint32_t> order =
      Order(records, [](const DecisionRecord& a, const DecisionRecord& b) {
        if (a.kind != b.kind) return a.kind < b.kind;
        if (a.index != b.index) return a.index < b.index;
        if (a.gateway != b.gateway) return a.gateway < b.gateway;
        return a.intended_us < b.intended_us;
      });
  StoreOpFloorResult ops;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  // Decisions that one store reply made together (a lease that paid some waiting requests and
  // told the rest the key is out) are decided within this of each other.
  constexpr int64_t kSameReplyUs = 100;
  // A stream's leased requests and its checked ones (strict, or an operation a lease cannot
  // pay) are two streams: a CHECK's answer says nothing of the lease's units, nor the reverse.
  struct Stream {
    int64_t lease_end = kNone, lease_left = 0, deny_until = kNone, op_done = kNone;
    bool leased_last = false;  // the stream's last store op was a lease that admitted
  };
  Stream streams[2];
  const DecisionRecord* last = nullptr;
  for (uint32_t i : order) {
    const DecisionRecord& r = records[i];
    if (last == nullptr || !SameKey(*last, r) || last->gateway != r.gateway) {
      streams[0] = streams[1] = Stream{};
    }
    last = &r;
    if (r.error || r.source == kFallback) continue;
    const KindLimits& k = limits[r.kind];
    const bool checked = k.strict || r.checked;
    Stream& st = streams[checked ? 1 : 0];
    // Warm-up arrivals set the stream's state (a lease or a denial cached then covers what
    // follows, as it does for the client), but count nothing.
    const uint64_t counted = r.measured;
    if (!r.allowed) {
      if (r.intended_us < st.deny_until) continue;
      // The reply to the stream's last lease could have said when the key runs out, and so
      // could a reply that denied others at the same moment.
      const bool told =
          st.leased_last || (st.op_done != kNone && r.done_us - st.op_done <= kSameReplyUs);
      if (!told) {
        ops.denials += counted;
        st.op_done = r.done_us;
      }
      st.leased_last = false;
      // From the decision: the client counts its retry_after from when it decided.
      st.deny_until = r.retry_after_ms <= 0 ? kNone : r.done_us + int64_t{r.retry_after_ms} * 1000;
      continue;
    }
    st.deny_until = kNone;
    if (checked) {
      ops.checks += counted;
      st.op_done = r.done_us;
      continue;
    }
    if (r.intended_us < st.lease_end && r.cost <= st.lease_left) {
      st.lease_left -= r.cost;
      continue;
    }
    // Requests that waited together are paid by one lease's reply, sized for all of them.
    if (st.leased_last && r.done_us - st.op_done <= kSameReplyUs) {
      st.lease_left = std::max<int64_t>(0, st.lease_left - r.cost);
      continue;
    }
    ops.leases += counted;
    st.op_done = r.done_us;
    st.leased_last = true;
    st.lease_end = r.done_us + k.lease_ttl_us;  // a lease lives a TTL from its reply
    st.lease_left = std::max<int64_t>(k.lease_units, r.cost) - r.cost;
  }
  return ops;
}

Accuracy CheckAccuracy(const std::vector<DecisionRecord>& records,
                       const std::vector<KindLimits>& limits, const Workload& workload,
                       const std::vector<std::vector<uint16_t>>* resets) {
  const std::vector<uint32_t> order =
      Order(records, [](const DecisionRecord& a, const DecisionRecord& b) {
        if (a.kind != b.kind) return a.kind < b.kind;
        if (a.index != b.index) return a.index < b.index;
        return a.done_us < b.done_us;
      });
  Accuracy out;
  std::vector<Admission> charged, spent;
  std::vector<uint16_t> leasing, falling_back;
  size_t begin = 0;
  while (begin < order.size()) {
    const DecisionRecord& first = records[order[begin]];
    size_t end = begin;
    charged.clear();
    spent.clear();
    leasing.clear();
    falling_back.clear();
    const KindLimits& k = limits[first.kind];
    for (; end < order.size() && SameKey(records[order[end]], first); ++end) {
      const DecisionRecord& r = records[order[end]];
      if (r.error || !r.allowed) continue;
      // Charged between the request's arrival and its decision; a leased unit up to a TTL
      // before its arrival, when the lease was granted. Spent at the arrival.
      // A lease-mode admission may have been paid from units in hand, charged when their
      // lease was granted; a checked one was charged by its own CHECK, a fallback one by the
      // gateway's local bucket as it decided.
      const bool leased = !(k.strict || r.checked) && r.source != kFallback;
      const int64_t from = leased ? r.intended_us - k.charge_lead_us : r.intended_us;
      charged.push_back({from, r.done_us, r.cost});
      spent.push_back({r.intended_us, r.done_us, r.cost});
      if (r.source == kLease) leasing.push_back(r.gateway);
      if (r.source == kFallback) {
        falling_back.push_back(r.gateway);
        out.fallback_units_by_class[static_cast<size_t>(k.class_index)] +=
            static_cast<uint64_t>(r.cost);
      }
    }
    const size_t at = begin;
    begin = end;
    if (charged.empty()) continue;
    ++out.keys_checked;
    const std::string& key = workload.name(static_cast<Kind>(first.kind), records[order[at]].index);
    auto distinct = [](std::vector<uint16_t>& v) {
      std::sort(v.begin(), v.end());
      return static_cast<int64_t>(std::unique(v.begin(), v.end()) - v.begin());
    };
    const PromiseBound promise{k.limit, k.window_us, k.burst, /*resolution_us=*/1000};
    const WorstWindow w = ExactWorstWindow(charged, promise);
    const int64_t reset = resets == nullptr ? 0 : (*resets)[first.kind][records[order[at]].index];
    if (falling_back.empty() && reset == 0) {
      if (w.over) ++out.keys_over_promise;
      Consider(out.worst, w, k, key, true);
      // Real time: B + g·S + L·t/W, g the gateways that spent leases of this key.
      const WorstWindow real = ExactWorstWindow(spent, promise);
      if (real.over) ++out.keys_over_promise_real_time;
      const int64_t g = distinct(leasing);
      const PromiseBound leased{k.limit, k.window_us, k.burst + g * k.lease_units, 1000};
      if (ExactWorstWindow(spent, leased).over) ++out.keys_over_real_time_bound;
      Consider(out.worst_real_time, real, k, key, true);
      continue;
    }
    ++out.keys_with_fallback;
    if (w.over) ++out.keys_over_promise_with_fallback;
    // The allowance: the promise plus each falling-back gateway's local bucket, over the
    // same interval: B + g·Bf + (L/W + g·Lf/Wf)·t, in integers over W·Wf.
    bool within = true;
    if (k.fallback_limit >= 0 || falling_back.empty()) {
      const int64_t g = falling_back.empty() ? 0 : distinct(falling_back);
      // B + g·Bf + (L/W + g·Lf/Wf)·t over the common window W·Wf/gcd, in checked integers.
      const int64_t common = std::gcd(k.window_us, k.fallback_window_us);
      int64_t limit = 0, window = 0, extra = 0;
      const bool fits =
          !__builtin_mul_overflow(k.limit, k.fallback_window_us / common, &limit) &&
          !__builtin_mul_overflow(g * std::max<int64_t>(0, k.fallback_limit), k.window_us / common,
                                  &extra) &&
          !__builtin_add_overflow(limit, extra, &limit) &&
          !__builtin_mul_overflow(k.window_us, k.fallback_window_us / common, &window);
      const PromiseBound allowance{limit, window, k.burst * (1 + reset) + g * k.fallback_burst,
                                   1000};
      // (A window product past 64 bits is reported as over, never hidden.)
      within = fits && !ExactWorstWindow(charged, allowance).over;
    }
    if (!within) ++out.keys_over_allowance;
    Consider(out.worst_with_fallback, w, k, key, within);
  }
  return out;
}

}  // namespace limiter::bench
