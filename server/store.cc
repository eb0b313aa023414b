#include "server/store.h"

#include <cstring>

#include "common/limits.h"

namespace limiter {
namespace {

// The sliding log is the one algorithm whose state does not fit in 16 bytes; its slot holds
// a pointer to the state on the heap.
SlidingLog::State*& LogPointer(Slot& slot) {
  static_assert(sizeof(SlidingLog::State*) <= sizeof(Slot::state));
  return *reinterpret_cast<SlidingLog::State**>(slot.state.data());
}
const SlidingLog::State* LogPointer(const Slot& slot) {
  return *reinterpret_cast<SlidingLog::State* const*>(slot.state.data());
}

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

}  // namespace

Store::Store(const PolicySet& policies, Options options) : max_keys_(options.max_keys) {
  for (const Policy& p : policies.policies()) {
    algorithms_.push_back(p.algorithm);
    rates_.push_back(p.rate);
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

Store::StripeLock::StripeLock(Store& store, std::span<const size_t> stripes)
    : store_(store), count_(std::min(stripes.size(), kMaxLocks)) {
  for (size_t i = 0; i < count_; ++i) {
    stripes_[i] = stripes[i];
    store_.stripes_[stripes_[i]]->mu.lock();
  }
}

Store::StripeLock::~StripeLock() {
  for (size_t i = count_; i-- > 0;) store_.stripes_[stripes_[i]]->mu.unlock();
}

Slot* Store::Find(int policy, const KeyId& id) {
  return stripes_[StripeOf(id)]->tables[static_cast<size_t>(policy)].Find(id);
}

KeyLimiter Store::Unpack(int policy, const Slot* slot) const {
  const Algorithm a = algorithms_[static_cast<size_t>(policy)];
  if (slot == nullptr) return KeyLimiter(a);
  switch (a) {
    case Algorithm::kFixedWindow: return KeyLimiter(Load<FixedWindow::State>(*slot));
    case Algorithm::kSlidingWindow: return KeyLimiter(Load<SlidingWindow::State>(*slot));
    case Algorithm::kTokenBucket: return KeyLimiter(Load<TokenBucket::State>(*slot));
    case Algorithm::kGcra: return KeyLimiter(Load<Gcra::State>(*slot));
    case Algorithm::kLeakyBucket: return KeyLimiter(Load<LeakyBucket::State>(*slot));
    case Algorithm::kSlidingLog: {
      const SlidingLog::State* log = LogPointer(*slot);
      return log ? KeyLimiter(KeyLimiter::State(*log)) : KeyLimiter(a);
    }
  }
  return KeyLimiter(a);
}

void Store::Pack(int, KeyLimiter&& limiter, Slot* slot) {
  std::visit(
      [&](auto& s) {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, SlidingLog::State>) {
          SlidingLog::State*& log = LogPointer(*slot);
          if (log) {
            *log = std::move(s);
          } else {
            log = new SlidingLog::State(std::move(s));
          }
        } else {
          Save(s, *slot);
        }
      },
      limiter.state());
}

Slot* Store::Insert(int policy, const KeyId& id) {
  return stripes_[StripeOf(id)]->tables[static_cast<size_t>(policy)].Insert(id);
}

void Store::Erase(int policy, const KeyId& id) {
  Stripe& stripe = *stripes_[StripeOf(id)];
  KeyTable& table = stripe.tables[static_cast<size_t>(policy)];
  if (Slot* s = table.Find(id)) {
    Release(policy, *s);
    table.Erase(s);
    keys_.fetch_sub(1, std::memory_order_relaxed);
  }
  DropBook(stripe, id);
}

void Store::DropBook(Stripe& stripe, const KeyId& id) {
  if (!stripe.books.empty() && stripe.books.erase(id) > 0) {
    books_.fetch_sub(1, std::memory_order_relaxed);
  }
}

LeaseBook* Store::FindBook(const KeyId& id) {
  auto& books = stripes_[StripeOf(id)]->books;
  if (books.empty()) return nullptr;
  auto it = books.find(id);
  return it == books.end() ? nullptr : &it->second;
}

LeaseBook& Store::AddBook(const KeyId& id) {
  auto [it, added] = stripes_[StripeOf(id)]->books.try_emplace(id);
  if (added) books_.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

Store::Split* Store::FindSplit(const KeyId& id) {
  auto& splits = stripes_[StripeOf(id)]->splits;
  if (splits.empty()) return nullptr;
  auto it = splits.find(id);
  return it == splits.end() ? nullptr : &it->second;
}

Store::Split& Store::AddSplit(const KeyId& id) {
  auto [it, added] = stripes_[StripeOf(id)]->splits.try_emplace(id);
  if (added) splits_.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

void Store::EraseSplit(const KeyId& id) {
  if (stripes_[StripeOf(id)]->splits.erase(id)) splits_.fetch_sub(1, std::memory_order_relaxed);
}

void Store::VisitSplits(const std::function<bool(const KeyId&, Split&)>& visit) {
  if (!has_splits()) return;
  for (auto& stripe : stripes_) {
    std::lock_guard<std::mutex> guard(stripe->mu);
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

bool Store::TryReserve(int64_t n) {
  int64_t have = keys_.load(std::memory_order_relaxed);
  do {
    if (have + n > max_keys_) return false;
  } while (!keys_.compare_exchange_weak(have, have + n, std::memory_order_relaxed));
  return true;
}

bool Store::IsFresh(int policy, const Slot& slot, int64_t now) const {
  const Rate& rate = rates_[static_cast<size_t>(policy)];
  switch (algorithms_[static_cast<size_t>(policy)]) {
    case Algorithm::kFixedWindow:
      return FixedWindow::IsFresh(rate, Load<FixedWindow::State>(slot), now);
    case Algorithm::kSlidingWindow:
      return SlidingWindow::IsFresh(rate, Load<SlidingWindow::State>(slot), now);
    case Algorithm::kTokenBucket:
      return TokenBucket::IsFresh(rate, Load<TokenBucket::State>(slot), now);
    case Algorithm::kGcra: return Gcra::IsFresh(rate, Load<Gcra::State>(slot), now);
    case Algorithm::kLeakyBucket:
      return LeakyBucket::IsFresh(rate, Load<LeakyBucket::State>(slot), now);
    case Algorithm::kSlidingLog: {
      const SlidingLog::State* log = LogPointer(slot);
      return log == nullptr || SlidingLog::IsFresh(rate, *log, now);
    }
  }
  return false;
}

void Store::Release(int policy, Slot& slot) {
  if (algorithms_[static_cast<size_t>(policy)] == Algorithm::kSlidingLog) {
    delete LogPointer(slot);
    LogPointer(slot) = nullptr;
  }
}

size_t Store::SweepStripe(Stripe& stripe, int64_t now, size_t budget) {
  size_t erased = 0;
  for (size_t p = 0; p < stripe.tables.size(); ++p) {
    const int policy = static_cast<int>(p);
    erased += stripe.tables[p].Sweep(&stripe.cursors[p], budget, [&](Slot& s) {
      if (!IsFresh(policy, s, now)) return false;
      if (!stripe.splits.empty() && stripe.splits.count(s.id)) return false;  // kept to reopen
      // A fresh key has no charge in effect: nothing its leases charged can come back.
      DropBook(stripe, s.id);
      Release(policy, s);
      return true;
    });
  }
  if (erased > 0) {
    keys_.fetch_sub(static_cast<int64_t>(erased), std::memory_order_relaxed);
    evictions_.fetch_add(static_cast<int64_t>(erased), std::memory_order_relaxed);
  }
  return erased;
}

size_t Store::ReclaimLocked(const StripeLock& lock, int64_t now, size_t budget) {
  size_t erased = 0;
  for (size_t s : lock.stripes()) erased += SweepStripe(*stripes_[s], now, budget);
  return erased;
}

size_t Store::Sweep(int64_t now, size_t budget) {
  size_t erased = 0;
  for (auto& stripe : stripes_) {
    std::lock_guard<std::mutex> guard(stripe->mu);
    erased += SweepStripe(*stripe, now, budget);
  }
  return erased;
}

size_t Store::table_bytes() {
  size_t bytes = 0;
  for (auto& stripe : stripes_) {
    std::lock_guard<std::mutex> guard(stripe->mu);
    for (const KeyTable& t : stripe->tables) bytes += t.bytes();
  }
  return bytes;
}

}  // namespace limiter
