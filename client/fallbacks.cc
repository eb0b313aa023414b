#include "client/fallbacks.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "common/mutex.h"
#include "protocol/rules.h"

namespace limiter {
namespace {

// Fallback limiters per gateway before the first sweep for fresh ones.
constexpr size_t kFirstSweep = 64;

}  // namespace

struct Fallbacks::Shedder {
  Mutex mu;
  int64_t in_use LIMITER_GUARDED_BY(mu) = 0;
  std::deque<std::pair<uint64_t, std::shared_ptr<Done>>> queue LIMITER_GUARDED_BY(mu);
  uint64_t next_ticket LIMITER_GUARDED_BY(mu) = 0;
};

Fallbacks::Fallbacks(const PolicySet& policies, int gateways, int64_t deny_retry_ms,
                     size_t max_debts, Scheduler& scheduler, ClientCounters& counters)
    : policies_(policies),
      scheduler_(scheduler),
      counters_(counters),
      deny_retry_ms_(deny_retry_ms),
      max_debts_(max_debts) {
  const int64_t n = std::max(1, gateways);
  for (const Policy& p : policies_.policies()) {
    // L/N per W is L per N*W, exactly; the burst shrinks the same way.
    Rate share = p.rate;
    if (!p.fallback.allow_overshoot && n > 1) {
      const int64_t burst = std::max<int64_t>(1, p.rate.burst() / n);
      if (Rate::Validate(p.rate.limit(), p.rate.window_ms() * n, burst).ok()) {
        share = Rate(p.rate.limit(), p.rate.window_ms() * n, burst);
      } else {
        share = Rate(std::max<int64_t>(1, p.rate.limit() / n), p.rate.window_ms(), burst);
      }
    }
    contract_.push_back(share);
    shedders_.push_back(std::make_unique<Shedder>());
  }
}

Fallbacks::~Fallbacks() = default;

void Fallbacks::Finish(client::Decision d, const Done& done) {
  counters_.Count(d);
  done(std::move(d));
}

void Fallbacks::Decide(const ResolvedRequest& r, const std::string& owner, Done done) {
  const Policy& p = *r.policy;
  ClientCounters::Add(counters_.fallback_by_class[static_cast<size_t>(p.limit_class)]);
  client::Decision d;
  d.policy = p.name;
  d.limit = p.rate.limit();
  d.window_ms = p.rate.window_ms();
  d.source = client::Source::kFallback;
  switch (p.limit_class) {
    case LimitClass::kSecurity:
    case LimitClass::kContract:
      LocalLimits(r, std::move(d), std::move(done));
      return;
    case LimitClass::kBilling:
      // Fail open, and owe the owner what was used.
      Owe(r, owner);
      d.allowed = true;
      Finish(std::move(d), done);
      return;
    case LimitClass::kCapacity:
      Shed(r, std::move(d), std::move(done));
      return;
  }
}

// A local limiter per key for the policy and every ancestor of the same kind: all of them
// pass, or none is charged.
void Fallbacks::LocalLimits(const ResolvedRequest& r, client::Decision d, Done done) {
  const int64_t now_ms = scheduler_.NowUs() / 1000;
  struct Local {
    KeyId id;
    const Policy* policy;
    const Rate* rate;
  };
  std::vector<Local> locals;
  for (const Policy* q : policies_.Chain(*r.policy)) {
    const Rate* rate = nullptr;
    if (q->limit_class == LimitClass::kSecurity && q->fallback.local_rate) {
      rate = &*q->fallback.local_rate;
    } else if (q->limit_class == LimitClass::kContract) {
      rate = &contract_[static_cast<size_t>(q - policies_.policies().data())];
    } else if (q->limit_class == LimitClass::kSecurity) {
      // A security limit with no local limit denies while its owner is away.
      d.allowed = false;
      d.policy = q->name;
      d.retry_after = std::chrono::milliseconds(deny_retry_ms_);
      Finish(std::move(d), done);
      return;
    } else {
      continue;
    }
    const KeyId id =
        q == r.policy ? protocol::LimitId(*q, r.key, r.tenant) : protocol::AncestorId(*q, r.tenant);
    locals.push_back({id, q, rate});
  }
  {
    MutexLock lock(mu_);
    if (limits_.size() >= sweep_at_) {
      // Keys whose local limiter is back to fresh carry nothing: drop them, so the
      // fallback's memory follows the keys in use, not every key ever seen.
      std::erase_if(limits_, [&](const auto& entry) {
        return entry.second.limiter.IsFresh(*entry.second.rate, now_ms);
      });
      sweep_at_ = std::max(kFirstSweep, 2 * limits_.size());
    }
    std::vector<KeyLimiter*> limiters;
    d.allowed = true;
    for (const Local& l : locals) {
      KeyLimiter& limiter =
          limits_.try_emplace(l.id, LocalLimit{KeyLimiter(l.policy->algorithm), l.rate})
              .first->second.limiter;
      limiters.push_back(&limiter);
      const LimitDecision peek = limiter.Peek(*l.rate, now_ms, r.cost);
      if (!peek.allowed && d.allowed) {
        d.allowed = false;
        d.policy = l.policy->name;
        d.limit = l.rate->limit();
        d.window_ms = l.rate->window_ms();
        d.retry_after = peek.retry_after_ms == kNever
                            ? client::kRetryNever
                            : std::chrono::milliseconds(peek.retry_after_ms);
        d.reset = std::chrono::milliseconds(peek.reset_after_ms);
        d.remaining = 0;
      }
    }
    if (d.allowed) {
      for (size_t i = 0; i < limiters.size(); ++i) {
        const LimitDecision x = limiters[i]->Decide(*locals[i].rate, now_ms, r.cost);
        if (i == 0) {
          d.remaining = x.remaining;
          d.reset = std::chrono::milliseconds(x.reset_after_ms);
        }
      }
    }
  }
  Finish(std::move(d), done);
}

void Fallbacks::Shed(const ResolvedRequest& r, client::Decision d, Done done) {
  const Policy& p = *r.policy;
  Shedder& s = *shedders_[static_cast<size_t>(r.index)];
  auto waiting = std::make_shared<Done>(std::move(done));
  MutexLock lock(s.mu);
  if (s.in_use < p.fallback.max_concurrency) {
    ++s.in_use;
    lock.Unlock();
    GrantSlot(r.index, waiting);
    return;
  }
  if (static_cast<int64_t>(s.queue.size()) >= p.fallback.max_queue) {
    lock.Unlock();
    d.allowed = false;
    d.retry_after = std::chrono::milliseconds(p.fallback.queue_timeout_ms);
    Finish(std::move(d), *waiting);
    return;
  }
  // Wait for a slot, at most queue_timeout.
  const uint64_t ticket = s.next_ticket++;
  s.queue.emplace_back(ticket, waiting);
  lock.Unlock();
  scheduler_.After(p.fallback.queue_timeout_ms * 1000, [this, &s, &p, ticket] {
    std::shared_ptr<Done> expired;
    {
      MutexLock guard(s.mu);
      auto it = std::find_if(s.queue.begin(), s.queue.end(),
                             [&](const auto& q) { return q.first == ticket; });
      if (it == s.queue.end()) return;  // it got a slot
      expired = std::move(it->second);
      s.queue.erase(it);
    }
    client::Decision denied;
    denied.policy = p.name;
    denied.limit = p.rate.limit();
    denied.window_ms = p.rate.window_ms();
    denied.source = client::Source::kFallback;
    Finish(std::move(denied), *expired);
  });
}

void Fallbacks::GrantSlot(int policy, const std::shared_ptr<Done>& done) {
  const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
  client::Decision d;
  d.allowed = true;
  d.policy = p.name;
  d.limit = p.rate.limit();
  d.window_ms = p.rate.window_ms();
  d.source = client::Source::kFallback;
  d.permit = client::Permit([this, policy] { ReleaseSlot(policy); });
  Finish(std::move(d), *done);
}

void Fallbacks::ReleaseSlot(int policy) {
  Shedder& s = *shedders_[static_cast<size_t>(policy)];
  std::shared_ptr<Done> next;
  {
    MutexLock lock(s.mu);
    if (s.queue.empty()) {
      --s.in_use;
      return;
    }
    next = std::move(s.queue.front().second);  // the slot passes on
    s.queue.pop_front();
  }
  scheduler_.Post([this, policy, next] { GrantSlot(policy, next); });
}

// ----- billing debts -----

namespace {

void Log(const std::string& line) { std::fprintf(stderr, "limiter client: %s\n", line.c_str()); }

}  // namespace

void Fallbacks::Drop(size_t reason, int64_t units) {
  ClientCounters::Add(counters_.billing_units_dropped[reason], static_cast<uint64_t>(units));
}

void Fallbacks::Owe(const ResolvedRequest& r, const std::string& owner) {
  MutexLock lock(debts_mu_);
  auto it = debts_.find(r.id);
  if (it == debts_.end()) {
    if (debts_.size() >= max_debts_) {
      Drop(ClientCounters::kUnrecorded, r.cost);
      if (!full_logged_) {
        full_logged_ = true;
        Log("billing debts: " + std::to_string(debts_.size()) +
            " keys owe units, the most allowed (Options::max_billing_debts): requests of other "
            "keys are admitted and their units dropped (billing_debt_units_dropped)");
      }
      return;
    }
    Debt& debt = debts_[r.id];
    debt.number = next_number_++;
    debt.policy = r.index;
    debt.key = std::string(r.key);
    debt.tenant = std::string(r.tenant);
    debt.owner = owner;
    debt.units = r.cost;
    owed_units_ += r.cost;
    if (journal_) journal_->Opened(debt.number, r.policy->name, r.key, r.tenant, r.cost);
    return;
  }
  Debt& debt = it->second;
  debt.owner = owner;
  const int64_t units = std::min(r.cost, BillingJournal::kMaxUnits - debt.units);
  if (units < r.cost) Drop(ClientCounters::kUnrecorded, r.cost - units);
  if (units <= 0) return;
  debt.units += units;
  owed_units_ += units;
  if (journal_) journal_->Added(debt.number, units);
}

std::vector<Fallbacks::DebtCall> Fallbacks::TakeDebts(const std::string& owner, size_t max,
                                                      int64_t now_us) {
  std::vector<DebtCall> calls;
  MutexLock lock(debts_mu_);
  for (auto& [id, debt] : debts_) {
    if (calls.size() == max) break;
    if (debt.owner != owner || debt.in_flight || debt.units <= 0 || debt.due_us > now_us) {
      continue;
    }
    debt.in_flight = true;
    calls.push_back({id, debt.policy, debt.key, debt.tenant, std::min(debt.units, kMaxCost)});
  }
  return calls;
}

bool Fallbacks::SettleDebt(const KeyId& id, int64_t paid, bool refused, int64_t retry_at_us) {
  MutexLock lock(debts_mu_);
  auto it = debts_.find(id);
  if (it == debts_.end()) return true;
  Debt& debt = it->second;
  debt.in_flight = false;
  paid = std::clamp<int64_t>(paid, 0, debt.units);
  debt.units -= paid;
  owed_units_ -= paid;
  ClientCounters::Add(counters_.billing_units_paid, static_cast<uint64_t>(paid));
  if (debt.units > 0 && !refused) {
    debt.due_us = retry_at_us;
    if (paid > 0 && journal_) journal_->Paid(debt.number, paid);
    return false;
  }
  if (debt.units > 0) {  // the owner never will take it
    Drop(ClientCounters::kRefused, debt.units);
    owed_units_ -= debt.units;
  }
  if (journal_) {
    journal_->Closed(debt.number, debt.units > 0 ? BillingJournal::CloseReason::kRefused
                                                 : BillingJournal::CloseReason::kPaid);
  }
  debts_.erase(it);
  if (debts_.size() < max_debts_ - max_debts_ / 10) full_logged_ = false;
  return true;
}

Status Fallbacks::RestoreDebts(BillingJournal::Replay replay, const OwnerOf& owner_of) {
  journal_ = std::move(replay.journal);
  const std::string where = "billing journal " + journal_->path() + ": ";
  if (!replay.torn.empty()) Log(where + replay.torn);
  std::map<std::string, std::pair<uint64_t, int64_t>> gone;  // why -> debts, units
  std::pair<uint64_t, int64_t> kept{0, 0}, full{0, 0};
  {
    MutexLock lock(debts_mu_);
    for (JournalDebt& j : replay.debts) {
      const Policy* p = policies_.Find(j.policy);
      if (p == nullptr || !protocol::MissingTenantError(*p, j.tenant).ok()) {
        const std::string why =
            p == nullptr ? "policy '" + j.policy + "' is no longer in " + policies_.source()
                         : "policy '" + j.policy + "' now needs a tenant, which they do not name";
        ++gone[why].first;
        gone[why].second += j.units;
        Drop(ClientCounters::kPolicyGone, j.units);
        continue;
      }
      const KeyId id = protocol::LimitId(*p, j.key, j.tenant);
      auto it = debts_.find(id);
      if (it != debts_.end()) {  // one limit now (a policy that no longer nests): merged
        const int64_t units = std::min(j.units, BillingJournal::kMaxUnits - it->second.units);
        if (units < j.units) Drop(ClientCounters::kUnrecorded, j.units - units);
        it->second.units += units;
        owed_units_ += units;
        kept.second += units;
        continue;
      }
      if (debts_.size() >= max_debts_) {
        ++full.first;
        full.second += j.units;
        Drop(ClientCounters::kUnrecorded, j.units);
        continue;
      }
      Debt& debt = debts_[id];
      debt.number = next_number_++;
      debt.policy = static_cast<int>(p - policies_.policies().data());
      debt.key = std::move(j.key);
      debt.tenant = std::move(j.tenant);
      debt.owner = owner_of(*p, debt.key, debt.tenant);
      debt.units = j.units;
      owed_units_ += j.units;
      ++kept.first;
      kept.second += j.units;
    }
  }
  for (const auto& [why, dropped] : gone) {
    Log(where + "dropped " + std::to_string(dropped.first) + " debts (" +
        std::to_string(dropped.second) + " units): " + why);
  }
  if (full.first > 0) {
    Log(where + "dropped " + std::to_string(full.first) + " debts (" + std::to_string(full.second) +
        " units): more keys than Options::max_billing_debts (" + std::to_string(max_debts_) + ")");
  }
  if (!replay.debts.empty()) {
    Log(where + "replayed " + std::to_string(kept.first) + " debts (" +
        std::to_string(kept.second) + " units) to pay back");
  }
  // The file from now on: exactly the debts kept, under the numbers they have here.
  if (Status s = CompactJournal(); !s.ok()) {
    return Error{where + "could not be rewritten: " + s.error()};
  }
  journal_->Start([this] { (void)CompactJournal(); });  // a failure is counted and logged
  return Status::Ok();
}

std::vector<std::string> Fallbacks::Creditors() const {
  std::set<std::string> owners;
  MutexLock lock(debts_mu_);
  for (const auto& [id, debt] : debts_) {
    if (!debt.owner.empty()) owners.insert(debt.owner);
  }
  return {owners.begin(), owners.end()};
}

Status Fallbacks::CompactJournal() {
  if (!journal_) return Status::Ok();
  {
    MutexLock lock(debts_mu_);
    BillingJournal::Image image;
    for (const auto& [id, debt] : debts_) {
      image.Add(debt.number, policies_.policies()[static_cast<size_t>(debt.policy)].name, debt.key,
                debt.tenant, debt.units);
    }
    if (!journal_->BeginRewrite(std::move(image))) {
      return Error{"rewrite: another rewrite is under way"};
    }
  }
  return journal_->FinishRewrite();
}

void Fallbacks::AddCounters(client::Counters& c) const {
  {
    MutexLock lock(debts_mu_);
    c.billing_debts = debts_.size();
    c.billing_debt_units = static_cast<uint64_t>(owed_units_);
  }
  if (journal_) {
    c.billing_journal_errors = journal_->errors();
    c.billing_journal_rewrites = journal_->rewrites();
  }
}

size_t Fallbacks::limiters() const {
  MutexLock lock(mu_);
  return limits_.size();
}

}  // namespace limiter
