#include "server/store.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/limits.h"
#include "common/mutex.h"
#include "server/policy_clock.h"

namespace limiter {
namespace {

// A 64-bit finalizer (splitmix64's): nearby inputs give unrelated outputs.
uint64_t MixBits(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

// A sliding log's slot: its state on the heap, and the key units recorded for it, the top
// bit marking a state lent out by Take.
struct LogSlot {
  SlidingLog::State* log = nullptr;
  uint64_t units = 0;
};
static_assert(sizeof(LogSlot) <= sizeof(Slot::state));
constexpr uint64_t kLent = uint64_t{1} << 63;

LogSlot GetLog(const Slot& slot) {
  LogSlot l;
  std::memcpy(&l, slot.state.data(), sizeof(l));
  return l;
}

void SetLog(const LogSlot& l, Slot& slot) { std::memcpy(slot.state.data(), &l, sizeof(l)); }

template <class S>
S Load(const Slot& slot) {
  S s;
  std::memcpy(&s, slot.state.data(), sizeof(S));
  return s;
}

template <class S>
void Save(const S& s, Slot& slot) {
  std::memcpy(slot.state.data(), &s, sizeof(S));
}

int64_t Over(int64_t held, int64_t reserve) { return held > reserve ? held - reserve : 0; }

}  // namespace

Result<std::vector<KeyBudget>> Store::PlanBudgets(const PolicySet& policies, int64_t max_keys) {
  if (max_keys <= 0) return Error{"max_keys must be positive, got " + std::to_string(max_keys)};
  int64_t explicit_sum = 0;
  int64_t shared = 0;
  std::string listed;
  for (const Policy& p : policies.policies()) {
    if (p.max_keys == 0) {
      ++shared;
      continue;
    }
    if (__builtin_add_overflow(explicit_sum, p.max_keys, &explicit_sum)) {
      explicit_sum = INT64_MAX;  // above any max_keys all the same
    }
    listed += (listed.empty() ? "" : ", ") + p.name + ": " + std::to_string(p.max_keys);
  }
  if (explicit_sum > max_keys) {
    return Error{policies.source() + ": the policies' max_keys add up to " +
                 std::to_string(explicit_sum) + " (" + listed + "), more than the node's " +
                 "max_keys of " + std::to_string(max_keys)};
  }
  // Half of what is left is reserved, in equal parts; the other half is nobody's.
  const int64_t share = shared == 0 ? 0 : (max_keys - explicit_sum) / (2 * shared);
  std::vector<KeyBudget> budgets;
  for (const Policy& p : policies.policies()) {
    budgets.push_back(p.max_keys == 0 ? KeyBudget{share, max_keys, false}
                                      : KeyBudget{p.max_keys, p.max_keys, true});
  }
  return budgets;
}

int64_t Store::LogUnits(size_t capacity) {
  const size_t bytes =
      sizeof(SlidingLog::State) +
      std::max(capacity, SlidingLog::Entries::kMinCapacity) * sizeof(SlidingLog::Entry);
  return 1 + static_cast<int64_t>((bytes + sizeof(Slot) - 1) / sizeof(Slot));
}

Store::Store(const PolicySet& policies, Options options)
    : clock_(options.clock),
      sub_bucket_idle_ms_(options.sub_bucket_idle_ms),
      max_keys_(options.max_keys) {
  Result<std::vector<KeyBudget>> budgets = PlanBudgets(policies, max_keys_);
  LIMITER_CHECK(budgets.ok(), "key budgets: " + budgets.error());  // PlanBudgets passed
  policy_count_ = policies.policies().size();
  policy_keys_ = std::make_unique<PolicyKeys[]>(policy_count_);
  free_ = max_keys_;
  for (size_t i = 0; i < policy_count_; ++i) {
    const Policy& p = policies.policies()[i];
    algorithms_.push_back(p.algorithm);
    rates_.push_back(p.rate);
    calendar_policies_.push_back(p.calendar ? &p : nullptr);
    new_key_units_.push_back(p.algorithm == Algorithm::kSlidingLog ? LogUnits(0) : 1);
    policy_keys_[i].budget = (*budgets)[i];
    free_ -= (*budgets)[i].reserve;
  }
  const size_t stripes = options.stripes == 0 ? 1 : options.stripes;
  for (size_t i = 0; i < stripes; ++i) {
    auto stripe = std::make_unique<Stripe>();
    stripe->tables.resize(algorithms_.size());
    stripe->cursors.resize(algorithms_.size());
    stripes_.push_back(std::move(stripe));
  }
}

Store::~Store() {
  for (auto& stripe : stripes_) {
    for (size_t p = 0; p < stripe->tables.size(); ++p) {
      stripe->tables[p].ForEach([&](Slot& s) { Release(static_cast<int>(p), s); });
    }
  }
}

// A set of locks chosen at run time: the lock analysis cannot name them. The functions that
// need a key's stripe locked reach it through LockedStripe, which says it is.
Store::StripeLock::StripeLock(Store& store,
                              std::span<const size_t> stripes) LIMITER_NO_THREAD_SAFETY_ANALYSIS
    : store_(store),
      count_(std::min(stripes.size(), kMaxLocks)) {
  for (size_t i = 0; i < count_; ++i) {
    stripes_[i] = stripes[i];
    store_.stripes_[stripes_[i]]->mu.Lock();
  }
}

Store::StripeLock::~StripeLock() LIMITER_NO_THREAD_SAFETY_ANALYSIS {
  for (size_t i = count_; i-- > 0;) store_.stripes_[stripes_[i]]->mu.Unlock();
}

// A hint, with no lock: a prefetch reads the table's slot array, never changes it.
void Store::Prefetch(int policy, const KeyId& id) const LIMITER_NO_THREAD_SAFETY_ANALYSIS {
  stripes_[StripeOf(id)]->tables[static_cast<size_t>(policy)].Prefetch(id);
}

Store::Stripe& Store::HeldStripe(const KeyId& id) const { return *stripes_[StripeOf(id)]; }

Slot* Store::Find(int policy, const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  return stripe.tables[static_cast<size_t>(policy)].Find(id);
}

KeyLimiter Store::Unpack(int policy, const Slot* slot) const {
  const Algorithm a = algorithms_[static_cast<size_t>(policy)];
  if (slot == nullptr) return KeyLimiter(a);
  switch (a) {
    case Algorithm::kFixedWindow:
      return KeyLimiter(Load<FixedWindow::State>(*slot));
    case Algorithm::kSlidingWindow:
      return KeyLimiter(Load<SlidingWindow::State>(*slot));
    case Algorithm::kTokenBucket:
      return KeyLimiter(Load<TokenBucket::State>(*slot));
    case Algorithm::kGcra:
      return KeyLimiter(Load<Gcra::State>(*slot));
    case Algorithm::kLeakyBucket:
      return KeyLimiter(Load<LeakyBucket::State>(*slot));
    case Algorithm::kSlidingLog: {
      const SlidingLog::State* log = GetLog(*slot).log;
      return log ? KeyLimiter(KeyLimiter::State(*log)) : KeyLimiter(a);
    }
  }
  return KeyLimiter(a);
}

KeyLimiter Store::Take(int policy, Slot* slot, int64_t now) {
  if (!IsLog(policy) || slot == nullptr) return Unpack(policy, slot);
  KeyLimiter taken(Algorithm::kSlidingLog);
  LogSlot l = GetLog(*slot);
  if (l.log) {
    auto& log = std::get<SlidingLog::State>(taken.state());
    log = std::move(*l.log);
    SlidingLog::Advance(rates_[static_cast<size_t>(policy)], log, now);
  }
  l.units |= kLent;
  SetLog(l, *slot);
  return taken;
}

bool Store::ReserveCharge(int policy, Slot* slot, KeyLimiter& taken) {
  if (slot == nullptr) return TryReserve(policy, NewKeyUnits(policy));
  if (!IsLog(policy)) return true;
  auto& log = std::get<SlidingLog::State>(taken.state());
  const size_t capacity = log.entries.capacity();
  const size_t size = log.entries.size();
  // After Advance (to seen_ms, the op's now) a charge adds at most one entry: none when it
  // merges into the newest, or when the log is at its most entries.
  if (size < capacity || (size > 0 && log.entries.back().t_ms == log.seen_ms) ||
      static_cast<int64_t>(size) >= SlidingLog::MaxEntries(rates_[static_cast<size_t>(policy)])) {
    return true;
  }
  const size_t grown = std::max(SlidingLog::Entries::kMinCapacity, capacity * 2);
  const int64_t more = LogUnits(grown) - LogUnits(capacity);
  if (more > 0 && !TryReserve(policy, more)) return false;
  log.entries.Reallocate(grown);
  LogSlot l = GetLog(*slot);
  l.units += static_cast<uint64_t>(more);
  SetLog(l, *slot);
  return true;
}

void Store::Pack(int policy, KeyLimiter&& limiter, Slot* slot) {
  std::visit(
      [&](auto& s) {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, SlidingLog::State>) {
          PackLog(policy, s, *slot);
        } else {
          Save(s, *slot);
        }
      },
      limiter.state());
}

void Store::PackLog(int policy, SlidingLog::State& log, Slot& slot) {
  // A quarter full, the buffer gives half back (or more): it is then at most half full, so
  // it neither grows nor shrinks again soon.
  const size_t capacity = log.entries.capacity();
  size_t fit = capacity;
  while (fit > SlidingLog::Entries::kMinCapacity && log.entries.size() * 4 <= fit) fit /= 2;
  if (fit != capacity) log.entries.Reallocate(fit);
  LogSlot l = GetLog(slot);
  if (l.log) {
    *l.log = std::move(log);
  } else {
    l.log = new SlidingLog::State(std::move(log));
  }
  const int64_t held = static_cast<int64_t>(l.units & ~kLent);
  const int64_t units = LogUnits(fit);
  if (units < held) Unreserve(policy, held - units);
  if (units > held) ForceReserve(policy, units - held);
  l.units = static_cast<uint64_t>(units);
  SetLog(l, slot);
}

void Store::GiveBack(int policy, KeyLimiter&& taken, Slot* slot) {
  if (slot != nullptr && IsLog(policy)) Pack(policy, std::move(taken), slot);
}

void Store::KeysIn(size_t stripe, int policy, const std::function<bool(const KeyId&)>& pick,
                   std::vector<KeyId>& out) {
  Stripe& held = *stripes_[stripe];
  held.mu.AssertHeld();  // the caller holds it
  held.tables[static_cast<size_t>(policy)].ForEach([&](const Slot& s) {
    if (pick(s.id)) out.push_back(s.id);
  });
}

Slot* Store::Insert(int policy, const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  Slot* slot = stripe.tables[static_cast<size_t>(policy)].Insert(id);
  if (IsLog(policy)) SetLog({nullptr, static_cast<uint64_t>(NewKeyUnits(policy))}, *slot);
  policy_keys_[static_cast<size_t>(policy)].keys.fetch_add(1, std::memory_order_relaxed);
  return slot;
}

void Store::Erase(int policy, const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  KeyTable& table = stripe.tables[static_cast<size_t>(policy)];
  if (Slot* s = table.Find(id)) {
    const int64_t units = SlotUnits(policy, *s);
    Release(policy, *s);
    table.Erase(s);
    policy_keys_[static_cast<size_t>(policy)].keys.fetch_sub(1, std::memory_order_relaxed);
    Unreserve(policy, units);
  }
  DropBook(stripe, id);
  stripe.sub_buckets.erase(id);
}

void Store::NoteSubBucket(const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  stripe.sub_buckets.insert(id);
}

void Store::DropBook(Stripe& stripe, const KeyId& id) {
  if (!stripe.books.empty() && stripe.books.erase(id) > 0) {
    books_.fetch_sub(1, std::memory_order_relaxed);
  }
}

LeaseBook* Store::FindBook(const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  auto& books = stripe.books;
  if (books.empty()) return nullptr;
  auto it = books.find(id);
  return it == books.end() ? nullptr : &it->second;
}

LeaseBook& Store::AddBook(const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  auto [it, added] = stripe.books.try_emplace(id);
  if (added) books_.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

Store::Split* Store::FindSplit(const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  auto& splits = stripe.splits;
  if (splits.empty()) return nullptr;
  auto it = splits.find(id);
  return it == splits.end() ? nullptr : &it->second;
}

Store::Split& Store::AddSplit(const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  auto [it, added] = stripe.splits.try_emplace(id);
  if (added) splits_.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

void Store::EraseSplit(const KeyId& id) {
  Stripe& stripe = HeldStripe(id);
  stripe.mu.AssertHeld();  // the caller holds the key's stripe (StripeLock)
  if (stripe.splits.erase(id)) splits_.fetch_sub(1, std::memory_order_relaxed);
}

void Store::VisitSplits(const std::function<bool(const KeyId&, Split&)>& visit) {
  if (!has_splits()) return;
  for (auto& stripe : stripes_) {
    MutexLock guard(stripe->mu);
    for (auto it = stripe->splits.begin(); it != stripe->splits.end();) {
      if (visit(it->first, it->second)) {
        it = stripe->splits.erase(it);
        splits_.fetch_sub(1, std::memory_order_relaxed);
      } else {
        ++it;
      }
    }
  }
}

bool Store::TryReserve(int policy, int64_t n) {
  PolicyKeys& k = policy_keys_[static_cast<size_t>(policy)];
  const int64_t reserve = k.budget.reserve;
  // Within the reserve: the policy's own atomic only.
  int64_t held = k.units.load(std::memory_order_relaxed);
  while (held + n <= reserve) {
    if (k.units.compare_exchange_weak(held, held + n, std::memory_order_relaxed)) return true;
  }
  MutexLock guard(budget_mu_);
  held = k.units.load();
  for (;;) {
    if (held + n > k.budget.cap) return false;
    const int64_t grow = Over(held + n, reserve) - Over(held, reserve);
    if (over_.load() + grow > free_) return false;
    if (k.units.compare_exchange_weak(held, held + n)) {
      over_.fetch_add(grow);
      return true;
    }
  }
}

void Store::ForceReserve(int policy, int64_t n) {
  PolicyKeys& k = policy_keys_[static_cast<size_t>(policy)];
  MutexLock guard(budget_mu_);
  const int64_t held = k.units.fetch_add(n);
  over_.fetch_add(Over(held + n, k.budget.reserve) - Over(held, k.budget.reserve));
}

void Store::Unreserve(int policy, int64_t n) {
  if (n == 0) return;
  PolicyKeys& k = policy_keys_[static_cast<size_t>(policy)];
  const int64_t held = k.units.fetch_sub(n);
  const int64_t shrink = Over(held, k.budget.reserve) - Over(held - n, k.budget.reserve);
  if (shrink > 0) over_.fetch_sub(shrink);
}

void Store::NoteRefusal(int policy) {
  policy_keys_[static_cast<size_t>(policy)].refusals.fetch_add(1, std::memory_order_relaxed);
}

Store::PolicyUsage Store::usage(int policy) const {
  const PolicyKeys& k = policy_keys_[static_cast<size_t>(policy)];
  return {k.keys.load(std::memory_order_relaxed), k.units.load(std::memory_order_relaxed),
          k.refusals.load(std::memory_order_relaxed), k.budget};
}

int64_t Store::keys() const {
  int64_t n = 0;
  for (size_t p = 0; p < policy_count_; ++p)
    n += policy_keys_[p].keys.load(std::memory_order_relaxed);
  return n;
}

int64_t Store::units() const {
  int64_t n = 0;
  for (size_t p = 0; p < policy_count_; ++p)
    n += policy_keys_[p].units.load(std::memory_order_relaxed);
  return n;
}

int64_t Store::committed() const { return max_keys_ - free_ + over_.load(); }

bool Store::IsFresh(int policy, const Slot& slot, int64_t now) const {
  const Rate& rate = rates_[static_cast<size_t>(policy)];
  switch (algorithms_[static_cast<size_t>(policy)]) {
    case Algorithm::kFixedWindow:
      return FixedWindow::IsFresh(rate, Load<FixedWindow::State>(slot), now);
    case Algorithm::kSlidingWindow:
      return SlidingWindow::IsFresh(rate, Load<SlidingWindow::State>(slot), now);
    case Algorithm::kTokenBucket:
      return TokenBucket::IsFresh(rate, Load<TokenBucket::State>(slot), now);
    case Algorithm::kGcra:
      return Gcra::IsFresh(rate, Load<Gcra::State>(slot), now);
    case Algorithm::kLeakyBucket:
      return LeakyBucket::IsFresh(rate, Load<LeakyBucket::State>(slot), now);
    case Algorithm::kSlidingLog: {
      const LogSlot l = GetLog(slot);
      if (l.units & kLent) return false;  // its op holds the state
      return l.log == nullptr || SlidingLog::IsFresh(rate, *l.log, now);
    }
  }
  return false;
}

void Store::Release(int policy, Slot& slot) {
  if (IsLog(policy)) {
    LogSlot l = GetLog(slot);
    delete l.log;
    l.log = nullptr;
    SetLog(l, slot);
  }
}

int64_t Store::SlotUnits(int policy, const Slot& slot) const {
  return IsLog(policy) ? static_cast<int64_t>(GetLog(slot).units & ~kLent) : 1;
}

void Store::PolicyTimes(int64_t now_ms, std::vector<int64_t>& out) const {
  out.assign(policy_count_, now_ms);
  for (size_t p = 0; p < policy_count_; ++p) {
    if (calendar_policies_[p] == nullptr) continue;
    out[p] = clock_ ? PolicyNowMs(*calendar_policies_[p], *clock_) : kNoTime;
  }
}

size_t Store::SweepStripe(Stripe& stripe, int64_t now_ms, size_t budget, size_t share) {
  size_t erased = 0;
  thread_local std::vector<int64_t> times;
  PolicyTimes(now_ms, times);
  for (size_t p = 0; p < stripe.tables.size(); ++p) {
    const int policy = static_cast<int>(p);
    const int64_t now = times[p];
    if (now == kNoTime) continue;
    int64_t units = 0;
    KeyTable& table = stripe.tables[p];
    const size_t look =
        share <= 1 ? budget
                   : std::min(budget, std::max(kMinSweepSlots, table.capacity() / share + 1));
    const size_t n = table.Sweep(&stripe.cursors[p], look, [&](Slot& s) {
      stripe.mu.AssertHeld();  // held by SweepStripe's caller around the whole sweep
      if (!IsFresh(policy, s, now)) return false;
      if (!stripe.splits.empty() && stripe.splits.count(s.id)) return false;  // kept to reopen
      if (!stripe.sub_buckets.empty()) {
        // Fresh as far back as the idle time: no op since (an op leaves a state short of
        // fresh at any time before it).
        const auto sub = stripe.sub_buckets.find(s.id);
        if (sub != stripe.sub_buckets.end()) {
          if (!IsFresh(policy, s, now - sub_bucket_idle_ms_)) return false;
          stripe.sub_buckets.erase(sub);
        }
      }
      // A fresh key has no charge in effect: nothing its leases charged can come back.
      DropBook(stripe, s.id);
      units += SlotUnits(policy, s);
      Release(policy, s);
      return true;
    });
    if (n == 0) continue;
    policy_keys_[p].keys.fetch_sub(static_cast<int64_t>(n), std::memory_order_relaxed);
    Unreserve(policy, units);
    erased += n;
  }
  if (erased > 0) evictions_.fetch_add(static_cast<int64_t>(erased), std::memory_order_relaxed);
  return erased;
}

size_t Store::ReclaimLocked(const StripeLock& lock, int64_t now, size_t budget) {
  size_t erased = 0;
  for (size_t s : lock.stripes()) {
    Stripe& stripe = *stripes_[s];
    stripe.mu.AssertHeld();  // one of the lock's
    if (now < stripe.next_reclaim_ms) continue;
    const auto pass =
        static_cast<uint64_t>(reclaim_passes_.fetch_add(1, std::memory_order_relaxed));
    erased += SweepStripe(stripe, now, budget, 1);
    const int64_t wait =
        std::clamp(stripe.reclaim_backoff_ms * 2, kReclaimBackoffMs, kMaxReclaimBackoffMs);
    stripe.reclaim_backoff_ms = wait;
    // The jitter only spreads the stripes out: a hash of which stripe and which pass will do.
    const uint64_t mixed = MixBits(pass * 0x9e3779b97f4a7c15u + s);
    stripe.next_reclaim_ms =
        now + wait + static_cast<int64_t>(mixed % static_cast<uint64_t>(wait / 2 + 1));
  }
  return erased;
}

void Store::ReclaimHelped(const StripeLock& lock) {
  for (size_t s : lock.stripes()) {
    Stripe& stripe = *stripes_[s];
    stripe.mu.AssertHeld();  // one of the lock's
    stripe.reclaim_backoff_ms = 0;
    stripe.next_reclaim_ms = 0;
  }
}

size_t Store::Sweep(int64_t now, size_t budget, size_t share) {
  size_t erased = 0;
  for (auto& stripe : stripes_) {
    MutexLock guard(stripe->mu);
    erased += SweepStripe(*stripe, now, budget, share);
  }
  return erased;
}

size_t Store::table_bytes() {
  size_t bytes = 0;
  for (auto& stripe : stripes_) {
    MutexLock guard(stripe->mu);
    for (const KeyTable& t : stripe->tables) bytes += t.bytes();
  }
  return bytes;
}

Store::Tally Store::Recount(int policy) {
  Tally tally;
  for (auto& stripe : stripes_) {
    MutexLock guard(stripe->mu);
    stripe->tables[static_cast<size_t>(policy)].ForEach([&](Slot& s) {
      ++tally.keys;
      // From the memory the slot holds, not from what was recorded for it.
      const SlidingLog::State* log = IsLog(policy) ? GetLog(s).log : nullptr;
      tally.units += !IsLog(policy) ? 1 : LogUnits(log ? log->entries.capacity() : 0);
    });
  }
  return tally;
}

}  // namespace limiter
