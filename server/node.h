// Node: the shard node's coordinator. Bytes of one frame in, the reply frame out: no sockets,
// so the server, the tests and the fuzzer all drive the same code. It verifies a frame,
// resolves each op's limits against the policies and the ring, runs the op on the store
// through one KeyTransaction, and encodes the reply; everything else is one of its parts,
// each with its own state and lock:
//   Authenticator  who a connection's peer is and what that lets it do (authenticator.h)
//   Ownership      which keys this node serves; what a member-list change owes (ownership.h)
//   Handoff        the keys moving to their new owner on a change (handoff.h)
//   HotKeys        sampling, splitting and merging hot keys (hot_keys.h)
//   RegionShares   this region's share of global limits (region_shares.h)
//   NodeMetrics    the counters, for STATS and /metrics (node_metrics.h)
// over the Store (store.h) and, for durable policies, the DurableStore (durable_store.h).
//
// Thread-safety: HandleFrame may run on many threads at once, each with its own Worker (its
// scratch and counters). The parts are thread-safe; policies and options are immutable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/policy.h"
#include "limiter/status.h"
#include "protocol/frame_codec.h"
#include "server/authenticator.h"
#include "server/durable_store.h"
#include "server/handoff.h"
#include "server/hot_keys.h"
#include "server/key_transaction.h"
#include "server/node_metrics.h"
#include "server/node_options.h"
#include "server/ownership.h"
#include "server/policy_table.h"
#include "server/region_shares.h"
#include "server/store.h"

namespace limiter::wire {
struct Op;
struct Request;
enum class Status : uint8_t;
}  // namespace limiter::wire

namespace limiter {

class Node {
 public:
  // `durable`: the database that keeps durable policies' keys (durable_store.h), owned by the
  // node. Null: durable policies' keys stay in memory only, as every other key (tests,
  // simulations; limiterd refuses to start that way, OpenDurableStore).
  Node(const PolicySet& policies, const Clock& clock, NodeOptions options,
       std::unique_ptr<DurableStore> durable = nullptr);
  ~Node();

  // One per thread that calls HandleFrame. Owned by the node; stable address.
  class Worker;
  Worker& AddWorker();
  static WorkerCounters& CountersOf(Worker& worker);

  enum class AfterFrame { kContinue, kClose };
  // Handles one frame (without its length prefix) and appends the reply frame to `out`.
  // Never throws on any input; bad input is an error reply and a counter. kClose: the frame
  // broke a bound or failed authentication; its reply says why, and the connection must be
  // closed once the reply is written.
  AfterFrame HandleFrame(Worker& worker, Session& session, std::span<const uint8_t> body,
                         std::vector<uint8_t>& out);
  // The same for an in-process caller that is trusted (tests, simulations, benchmarks). In
  // sync durability it returns once the frame's durable changes are synced.
  void HandleFrame(Worker& worker, std::span<const uint8_t> body, std::vector<uint8_t>& out);
  // The durable batch the replies of the frames handled since the last call must wait for
  // (DurableStore::Synced), or 0 when they wait for nothing; and forgets it.
  static uint64_t TakeSyncNeeded(Worker& worker);
  // The ops of the last frame HandleFrame handled on this worker (0 for one refused before
  // its ops): the measure of its work, by which a connection yields to the others.
  static size_t FrameOps(Worker& worker);
  // Appends a Reply frame carrying only `error`, for a connection about to be closed.
  void ErrorFrame(Worker& worker, std::string_view error, std::vector<uint8_t>& out);

  // Reclaims expired keys, a bounded amount of work per call; call it periodically. Each
  // call looks at up to sweep_budget slots of each policy's table in each stripe and, with
  // `share` > 1, at most about 1/share of it: the server's sweeper goes over every table in
  // share calls, so that a node holding millions of keys spends a little of each tick on them
  // instead of all of them at once.
  size_t Sweep(size_t share = 1);
  // Once a second: hand-off waits past their deadline end, and the hot keys' epoch ends.
  void Tick();

  // The parts.
  Authenticator& authenticator() { return auth_; }
  const Authenticator& authenticator() const { return auth_; }
  Ownership& ownership() { return ownership_; }
  const Ownership& ownership() const { return ownership_; }
  Handoff& handoff() { return handoff_; }
  HotKeys& hot_keys() { return hot_keys_; }
  RegionShares* regions() { return regions_.get(); }  // null when the node names no region
  const NodeMetrics& metrics() const { return metrics_; }
  Store& store() { return store_; }
  DurableStore* durable() const { return durable_.get(); }

  // Leaves the cluster (SIGTERM): every op is answered WrongOwner from now on, and the job
  // that hands every key to its next owner is queued (Handoff::RunNext runs it).
  void Leave(uint64_t generation) { ownership_.Leave(generation); }
  std::shared_ptr<const ClusterRing> membership() const { return ownership_.current(); }
  const NodeOptions& options() const { return options_; }
  const PolicySet& policies() const { return policies_; }
  const PolicyTable& policy_table() const { return table_; }
  int64_t NowMs() const { return clock_.NowMs(); }
  // Name/value counters for the STATS op, and the Prometheus text of /metrics.
  std::vector<std::pair<std::string, int64_t>> Stats() const { return metrics_.Stats(); }
  std::string RenderMetrics() const { return metrics_.Render(); }

 private:
  struct OpResult;
  struct Ahead;
  enum class CostUse { kCharge, kUnits, kNone };

  // The first bound the frame breaks.
  Status FrameBounds(const wire::Request& request) const;
  void HandleOp(Worker& w, const wire::Op& op, const ClusterRing& m, int64_t now, OpResult& r);
  // The policy and id of the op's first limit, worked out before the op is handled so that
  // the key's slot can be prefetched meanwhile (Store::Prefetch); Resolve takes them from
  // w.ahead instead of working them out again. Empty for an op Resolve would refuse or
  // resolve another way (a sub-bucket).
  Ahead Lookahead(Worker& w, const wire::Op& op) const;
  // Fills w.entries with the op's limits and their ancestors; a global limit gets this
  // region's share (RegionShares::Use), counting the units the op asks for as its demand.
  bool Resolve(Worker& w, const wire::Op& op, const ClusterRing& m, bool single, CostUse cost_use,
               int64_t now, OpResult& r);
  // Whether an op on a sub-bucket names a split its owner really made and still hands out;
  // when not, r fails with why: SplitChanged for a view out of date (on the key's owner,
  // with its split now), BadRequest for a token no member of the cluster made.
  bool SubBucketValid(Worker& w, int policy, std::string_view key, const wire::Op& op,
                      const ClusterRing& m, int64_t now, OpResult& r);
  // The reply of one handled op, appended to the worker's replies.
  void EncodeReply(Worker& w, const wire::Op& op, const ClusterRing& m, OpResult& r);
  // The ops. `now` is the node's clock; each key's state runs on its entry's (its policy's).
  void Check(Worker& w, bool dry_run, int64_t now, OpResult& r);
  void Lease(Worker& w, int64_t units, int64_t now, OpResult& r);
  void Return(Worker& w, int64_t units, uint64_t lease_id, int64_t leased_at, OpResult& r);
  void Inspect(Worker& w, int64_t now, OpResult& r);
  // With the entries' stripes locked: true when one of the op's own limits is split, and r
  // then carries the split instead of a decision.
  bool RedirectToSplit(Worker& w, int64_t now, OpResult& r);
  void SplitOp(Worker& w, int64_t reported, int64_t now, OpResult& r);
  // The node-to-node ops, from a session that proved the peer credential (MayActAsPeer).
  void MembersOp(Worker& w, OpResult& r);
  void HandoffOp(Worker& w, int64_t now, OpResult& r);
  void RegionsOp(Worker& w, const wire::Op& op, const ClusterRing& m, int64_t now, OpResult& r);
  // Whether the session of the frame being handled may send `what`, a node-to-node op,
  // speaking for `member` (null: it names none); a refusal is counted.
  Status MayActAsPeer(Worker& w, std::string_view what, const std::string* member);
  void Count(Worker& w, int type, Outcome outcome);
  const KeyTransaction::Stores& TxStores() const { return tx_stores_; }
  // The policy named `name`, or -1; the worker remembers the last one found in the frame
  // (the ops of a batch mostly name one policy: one compare instead of a hash).
  int FindPolicy(Worker& w, std::string_view name) const;
  // Waits until every frame begun before the call has ended (Handoff's barrier).
  void WaitForFrames(std::chrono::steady_clock::time_point deadline);

  const PolicySet& policies_;
  const Clock& clock_;
  const NodeOptions options_;
  const PolicyTable table_;
  Store store_;
  std::unique_ptr<DurableStore> durable_;
  std::unique_ptr<RegionShares> regions_;
  Authenticator auth_;
  Ownership ownership_;
  Handoff handoff_;
  HotKeys hot_keys_;
  NodeMetrics metrics_;
  const KeyTransaction::Stores tx_stores_;  // what an op's KeyTransaction works on
  // Lease ids: from a random start each life, so that a lease granted before a restart is
  // never mistaken for one granted after it.
  std::atomic<uint64_t> next_lease_id_;

  mutable Mutex workers_mu_;
  std::vector<std::unique_ptr<Worker>> workers_
      LIMITER_GUARDED_BY(workers_mu_);  // (the vector only)
};

}  // namespace limiter
