// Ownership: which keys this node serves, by the member list it holds, and what each change of
// the list owes (docs/features/handoff.md). Consensus-free: both follow from two rings.
//   - The keys a change moves from this node to another member are queued as a job, which the
//     hand-off runs (server/handoff.h): it sends them before their new owner serves them.
//   - The keys it brings wait: their ring slots answer Moving until the member that held them
//     says `done`, or until the hand-off deadline passes and they start fresh (the crash
//     promise: at most one burst per key).
// A list comes whole (DNS, a MEMBERS op, the configuration) and is adopted only when its
// generation is newer; or as one member's own announcement that it leaves or joins, which is
// applied to this node's list, so that changes announced at once merge instead of undoing
// each other. Lists held lately are remembered: a hand-off is taken only from a member that
// owned the slots in one of them (MayHand).
//
// Thread-safety: any thread. The current list is a snapshot read without a lock. Every change
// is made under change_mu_, from the list before it; waits, jobs and the lists remembered are
// guarded by mu_ (taken after change_mu_). Workers read a slot's wait with a relaxed load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/shared_value.h"
#include "limiter/status.h"
#include "protocol/ring.h"

namespace limiter {

// A member list (or a `done`) announced with a generation further ahead of this node's wall
// clock is refused: one bad clock must not freeze the list for everyone after it.
inline constexpr uint64_t kMaxGenerationAheadMs = 10 * 60 * 1000;

class Ownership {
 public:
  struct Options {
    std::string self;  // this node's host:port among the members; "" when standalone
    int64_t handoff_deadline_ms = 10'000;
    // Start with every key waiting: a node joining a running cluster, until it knows who
    // holds what (Join or OpenGate).
    bool join_gate = false;
  };
  Ownership(const Clock& clock, Options options, std::vector<std::string> members,
            uint64_t generation);

  // The list in force.
  std::shared_ptr<const ClusterRing> current() const { return current_.load(); }
  // Whether this node owns `slot` by `list` (a standalone node owns every slot).
  bool Owns(const ClusterRing& list, uint32_t slot) const {
    return list.ring.empty() || list.ring.members()[list.ring.OwnerOfSlot(slot)] == options_.self;
  }
  const std::string& self() const { return options_.self; }

  // Adopts a whole list of a larger generation (an older or equal one changes nothing). An
  // error when `self` is not among them; the list is left as it was.
  Status SetMembers(std::vector<std::string> members, uint64_t generation);
  // A member's own announcement that it leaves, or joins, at `generation`: applied to this
  // list at a generation newer than both. The keys this node gains from a leaver wait for its
  // `done` at `generation`. A joiner listed already (it restarted before anyone saw it go) is
  // sent `done` once every job queued before has run.
  Status MemberLeaves(const std::string& member, uint64_t generation);
  Status MemberJoins(const std::string& member, uint64_t generation);
  // Remembers who left and who came between two lists, for the DNS answers that lag behind.
  void NoteAnnounced(const ClusterRing& before, const ClusterRing& after);
  // A list found by DNS, corrected by what members announced in the last kAnnouncedHoldMs:
  // one that left is taken out, one that joined is put in.
  std::vector<std::string> WithAnnounced(std::vector<std::string> discovered) const;
  static constexpr int64_t kAnnouncedHoldMs = 5 * 60 * 1000;

  // Leaves the cluster: adopts the list without this node, so that every op is answered
  // WrongOwner, and queues the job that gives every key away.
  void Leave(uint64_t generation);
  bool leaving() const { return leaving_.load(); }
  // Joins a running cluster whose list is `previous`: adopts `members` (which hold this node)
  // and waits, for each key it gains, for that key's owner under `previous`.
  Status Join(std::vector<std::string> previous, std::vector<std::string> members,
              uint64_t generation);
  // Serves every key it owns now (a join that found nobody to wait for).
  void OpenGate();

  // Whether the keys of `slot` wait to be handed here. One relaxed load when nothing waits.
  bool Waiting(uint32_t slot) const {
    return pending_count_.load(std::memory_order_relaxed) != 0 &&
           pending_[slot].load(std::memory_order_relaxed) != 0;
  }
  // Ring slots whose keys wait; 0: this node serves every key it owns.
  int64_t waiting_slots() const { return pending_count_.load(std::memory_order_relaxed); }
  // Ends the waits for `from`'s keys up to `generation`: its `done`, or a joiner's verdict that
  // `from` cannot be reached.
  void Handed(const std::string& from, uint64_t generation);
  // Past the deadline, whatever still waits starts fresh here.
  void ExpireWaits(int64_t now);

  // The lists a hand-off may come by: the current one first, then up to kRecentLists held
  // before it (or joined from), newest first.
  std::vector<std::shared_ptr<const ClusterRing>> KnownLists() const;
  static constexpr size_t kRecentLists = 4;
  // Whether `from` may hand this node keys of `slot`: `from` is a member of a list in `known`,
  // it owned the slot in a list this node held lately (or by its current list still owns it)
  // and this node owns it now.
  bool MayHand(const std::string& from, uint32_t slot,
               const std::vector<std::shared_ptr<const ClusterRing>>& known) const;

  // Hand-off jobs: the keys to send, from the ring they were served under to the new one.
  struct Job {
    std::shared_ptr<const ClusterRing> from;
    std::shared_ptr<const ClusterRing> to;
    std::string done_to;  // who hears `done` at the end: every other member when empty
  };
  // Waits up to `wait` for a job and takes it (counted running until JobDone).
  std::optional<Job> TakeJob(std::chrono::milliseconds wait);
  void JobDone();
  // Keys arrived at a node that is leaving: queues a job that passes them on by its list.
  void ForwardReceived();
  // Jobs queued or running; 0 once every key given up has been sent.
  int64_t jobs_in_progress() const;

  struct Counters {
    std::atomic<int64_t> jobs{0};           // jobs queued
    std::atomic<int64_t> waits_expired{0};  // slots whose keys started fresh at the deadline
  };
  const Counters& counters() const { return counters_; }

 private:
  // Makes `next` the list if it is newer than the current one: the keys it moves away are
  // queued as a job, those it brings wait for their owner under `before` (the current ring
  // when null). False when `next` was not newer. The waits end with a `done` at
  // wait_generation (next's when 0). With change_mu_ held.
  bool Adopt(const Ring* before, std::shared_ptr<const ClusterRing> next,
             uint64_t wait_generation = 0) LIMITER_REQUIRES(change_mu_) LIMITER_EXCLUDES(mu_);
  // A leaving node's new list to hand its keys by: queues a job for what it still holds.
  // With change_mu_ held.
  void Rehome(std::shared_ptr<const ClusterRing> next) LIMITER_REQUIRES(change_mu_)
      LIMITER_EXCLUDES(mu_);
  // With mu_ held: makes `next` current, remembering the one it replaces; queues a job.
  void Publish(std::shared_ptr<const ClusterRing> next) LIMITER_REQUIRES(mu_);
  void Remember(std::shared_ptr<const ClusterRing> list) LIMITER_REQUIRES(mu_);
  void Queue(Job job) LIMITER_REQUIRES(mu_);

  const Clock& clock_;
  const Options options_;
  SharedValue<const ClusterRing> current_;
  std::atomic<bool> leaving_{false};
  // pending_[slot]: 0, or 1 + the index in waits_ of the member whose done the slot's keys
  // wait for (kAnySource: any, the join gate). Written under mu_, read by every worker.
  static constexpr uint8_t kAnySource = 255;
  std::unique_ptr<std::atomic<uint8_t>[]> pending_;
  std::atomic<int64_t> pending_count_{0};
  Counters counters_;

  Mutex change_mu_;  // one list change at a time; taken before mu_
  mutable Mutex mu_ LIMITER_ACQUIRED_AFTER(change_mu_);
  CondVar jobs_cv_;
  struct Wait {
    std::string from;
    uint64_t generation = 0;  // done for this generation or a later one ends the wait
  };
  std::vector<Wait> waits_ LIMITER_GUARDED_BY(mu_);
  std::unordered_map<std::string, uint64_t> handed_ LIMITER_GUARDED_BY(mu_);  // latest done
  // Members announced gone (false) or come (true), and when (node clock).
  std::unordered_map<std::string, std::pair<bool, int64_t>> announced_ LIMITER_GUARDED_BY(mu_);
  int64_t waits_until_ms_ LIMITER_GUARDED_BY(mu_) = 0;
  std::deque<Job> jobs_ LIMITER_GUARDED_BY(mu_);
  int64_t jobs_running_ LIMITER_GUARDED_BY(mu_) = 0;
  // Lists held before the current one, newest first (at most kRecentLists).
  std::deque<std::shared_ptr<const ClusterRing>> recent_ LIMITER_GUARDED_BY(mu_);
};

}  // namespace limiter
