// Node: the shard node's operation handler. Bytes of one frame in, the reply frame out: no
// sockets, so the server, the tests and the fuzzer all drive the same code.
//
// Thread-safety: HandleFrame may run on many threads at once, each with its own Worker. The
// store is shared (striped locks); policies and options are immutable.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <atomic>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/auth.h"
#include "common/clock.h"
#include "common/counter.h"
#include "common/frame_codec.h"
#include "common/histogram.h"
#include "common/policy.h"
#include "common/ring.h"
#include "common/shared_value.h"
#include "server/durable_store.h"
#include "server/region_shares.h"
#include "server/store.h"

namespace limiter::wire {
struct Op;
struct Peer;
struct Request;
enum class Status : uint8_t;
}

namespace limiter {

// Hot keys: detected from sampled operations, split into k sub-buckets over the cluster.
struct HotKeyOptions {
  size_t sketch_capacity = 256;   // counters per worker
  int sample_every = 4;           // count one operation in this many
  int64_t split_above = 10'000;   // ops/s on this node that split a key; 0: never
  double split_share = 0;         // or this share of the node's ops (at least 1000/s); 0: off
  int split_k = 4;                // sub-buckets: a power of two, 2 to 64
  int64_t merge_below = 0;        // ops/s, for 3 s, that merge it back; 0: split_above / 4
  int64_t split_valid_ms = 2000;  // a client renews its view of a split within this
};

struct NodeOptions {
  std::string name = "limiterd";
  // The cluster: every node's host:port, and this node's own among them. With no members
  // the node is standalone and owns every key. The list's generation orders lists: a node
  // and its gateways adopt only a list with a larger one (see SetMembers).
  std::vector<std::string> members;
  uint64_t generation = 0;
  std::string self;
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Bounds on the work one frame may ask for. Over any, the frame is refused whole (nothing
  // in it is done), the peer gets an error reply and its connection closes.
  uint32_t max_ops_per_frame = 8192;
  uint32_t max_reply_bytes = 8u << 20;   // checked as the reply is built
  uint32_t max_inspects_per_frame = 64;  // INSPECT; STATS and HOTKEYS: one each
  // The gateway secret(s): with any, every connection must prove one (or the peer secret) in
  // its hello, and split tokens are signed with the first. Empty: gateways need not prove
  // anything (a node that also has no peer credential trusts every peer).
  auth::Secrets secrets;
  // The peer credential, which only nodes hold: the peer secret(s), and/or, with mutual TLS,
  // a node certificate (peer_tls: the server tells node certificates from gateways' by a
  // separate CA and marks the session, NoteTlsNode). Only a session that proved it may send
  // what nodes say to each other: member-list changes, hand-offs, region reports.
  auth::Secrets peer_secrets;
  bool peer_tls = false;
  // How far apart the nodes' wall clocks may be: a split token is honoured this long past
  // its time, and a split reopens this much later.
  int64_t clock_skew_ms = 1000;
  Store::Options store;
  size_t sweep_budget = 4096;  // slots per stripe and policy per Sweep
  HotKeyOptions hot;
  // Hand-off (server/handoff.cc): how long this node answers Moving for keys it gained and
  // waits to be handed, before it serves them fresh (the crash promise); and whether it starts
  // with every key waiting, for a node joining a running cluster until it knows who holds
  // what (Join or OpenGate).
  int64_t handoff_deadline_ms = 10'000;
  bool join_gate = false;
  // Regions (region_shares.h): with a region named, `scope: global` limits are enforced as
  // this region's share. Checked by RegionShares::Check.
  RegionOptions regions;
  // The first lease id; 0: a random one (what a real node wants: ids never repeat across
  // restarts). Simulations fix it so that a seeded run repeats exactly.
  uint64_t lease_id_start = 0;
};

// What one hand-off (Node::Export) did.
struct HandoffStats {
  int64_t keys_sent = 0;
  int64_t keys_lost = 0;  // not delivered: a peer unreachable or refusing, or the deadline
  int64_t splits_sent = 0;
  int64_t batches = 0;
};

enum class BadFrame { kTooLarge, kEmpty, kInvalid, kTruncated };
inline constexpr int kBadFrameKinds = 4;
inline constexpr int kOpTypes = 10;  // wire::OpType values
enum Outcome { kAllowed, kDenied, kError };
// "check", "lease", ...; kOpTypes (or anything out of range) is "unknown".
std::string_view OpTypeName(int type);

// What one worker thread counts; read by the metrics thread.
struct WorkerCounters {
  explicit WorkerCounters(size_t policies) : decisions(policies) {}
  std::array<std::array<Counter, 3>, kOpTypes + 1> ops;  // [type][Outcome]; last: unknown type
  std::vector<std::array<Counter, 2>> decisions;         // [policy][allowed, denied]
  std::array<Counter, kBadFrameKinds> bad_frames;
  Counter refusals;  // new keys refused at max_keys
  Counter auth_failures;     // hellos without a valid proof; their connections were closed
  Counter peer_refusals;     // node-to-node ops from a session without the peer credential
                             // (or a peer speaking for another member), refused
  Counter sessions_revoked;  // sessions closed because the secret they proved was removed
  Counter frames_refused;    // frames over a bound (ops, reply, STATS/HOTKEYS/INSPECT)
  Counter split_refusals;    // ops on a sub-bucket with a token no member made (forged)
  Counter split_changed;     // ops on a sub-bucket from a view out of date (SplitChanged)
  Counter split_redirects;  // ops on a split key, answered with its split
  Counter frames;
  // Frames begun minus frames ended, as a sequence: odd while a frame is being handled (the
  // hand-off waits for the frames begun under an old ring to end).
  std::atomic<uint64_t> frame_seq{0};
  Counter moving;  // ops on keys this node waits to be handed (answered Moving)
  Counter connections_opened;
  Counter connections_closed;
  Histogram frame_latency_us;  // from a whole frame read to its reply encoded
};

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

  // What the node knows of one connection's peer: whether it has proved a credential yet,
  // which role that gives it, and which member it speaks for. Owned by the connection; used
  // on its worker's thread only.
  struct Session {
    bool authenticated = false;  // may send ops (the gateway role, or no secret is needed)
    bool peer = false;           // proved the peer credential: node-to-node ops too
    bool challenged = false;     // a challenge was sent; the next hello must answer it
    bool tls_node = false;       // its TLS client certificate is a node's (NoteTlsNode)
    auth::Nonce challenge{};
    auth::Nonce nonce{};     // the client's, that the challenge was answered for
    std::string peer_name;   // the member a peer proved to speak for; "" for a gateway
    std::string claimed;     // the peer_name of the hello the challenge answered
    bool in_process = false;     // a trusted caller in this process (HandleFrame's overload)
    uint64_t secret_tag = 0;       // the secret it proved (auth::SecretTag); 0: none
    bool tag_is_peer = false;      // that secret is a peer secret (else a gateway secret)
    uint64_t secrets_version = 0;  // the node's secrets when the tag was last checked
  };
  // A new connection's session: authenticated already when the node needs no gateway
  // secret, and a peer too when it authenticates nobody at all.
  Session NewSession() const;
  // The connection's TLS client certificate was checked against the peer CA.
  static void NoteTlsNode(Session& session, bool node_certificate) {
    session.tls_node = node_certificate;
  }
  // False once the secret a session proved has been removed (rotation): its connection must
  // be closed. Cheap while the secrets are unchanged (one load and compare).
  bool SessionValid(Session& session) const;
  // The largest frame a connection may send next: small until its peer has authenticated,
  // so that a peer without the secret cannot make the node buffer much.
  uint32_t FrameLimit(const Session& session) const;

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
  DurableStore* durable() const { return durable_.get(); }
  // Appends a Reply frame carrying only `error`, for a connection about to be closed.
  void ErrorFrame(Worker& worker, std::string_view error, std::vector<uint8_t>& out);
  static WorkerCounters& CountersOf(Worker& worker);

  // Reclaims expired keys, a bounded amount of work per call; call it periodically. Each
  // call looks at up to sweep_budget slots of each policy's table in each stripe and, with
  // `share` > 1, at most about 1/share of it: the server's sweeper goes over every table in
  // share calls, so that a node holding millions of keys spends a little of each tick on them
  // instead of all of them at once.
  size_t Sweep(size_t share = 1);
  // Once a second: ends the hot-key epoch, splits keys that got hot, merges back those that
  // cooled down, reopens merged keys.
  void Tick();

  struct HotKey {
    std::string policy;
    std::string key;     // a sub-bucket shows as "key#i"
    int64_t rate = 0;    // ops/s in the last second
    int64_t denied = 0;  // of those
    uint16_t split_k = 0;
  };
  // The hottest keys at the last tick, hottest first.
  std::vector<HotKey> HotKeys() const;

  // A member list and the ring derived from it. Immutable; shared.
  struct Membership {
    Ring ring;
    uint64_t generation = 0;
  };
  // Adopts a member list of a larger generation than the current one (a DNS refresh, say),
  // building its ring on the calling thread; an older or equal generation changes nothing.
  // An error when `self` is not among them, and the ring is left as it was. Thread-safe.
  std::optional<std::string> SetMembers(std::vector<std::string> members, uint64_t generation);
  std::shared_ptr<const Membership> membership() const { return membership_.load(); }
  std::shared_ptr<const Ring> ring() const;

  // ----- Hand-off of keys between nodes (server/handoff.cc) -----
  // When this node adopts a new member list, the live keys whose owner moves from it to
  // another member are sent there (Export) before that member serves them, and the keys it
  // gains wait (ops answer Moving) until their last owner says it is done, or until
  // handoff_deadline_ms. So a restart or a scale-out resets no key. Consensus-free: each node
  // derives both from the two rings.
  struct HandoffJob {
    std::shared_ptr<const Membership> from;  // the ring the keys were served under
    std::shared_ptr<const Membership> to;
    std::string done_to;  // who hears `done` at the end: every other member when empty
  };
  // Sends `frame` (a Request body) to `member`: the number of keys the member took, or -1
  // when it could not be delivered or was refused.
  using HandoffSink =
      std::function<int64_t(const std::string& member, std::span<const uint8_t> frame)>;
  // Waits up to `wait` for a job a ring change made and runs it (Export, within
  // handoff_deadline_ms); nullopt when none came (the server's hand-off thread).
  std::optional<HandoffStats> RunNextHandoff(const HandoffSink& send,
                                             std::chrono::milliseconds wait);
  // Waits until every frame begun under job.from has ended, then takes out every live key (and
  // split) whose owner under job.to is another member, and sends them there in batches, then
  // a last batch saying `done` to every other member of job.to. Stops sending at `deadline`
  // (keys not sent are counted lost).
  HandoffStats Export(const HandoffJob& job, const HandoffSink& send,
                      std::chrono::steady_clock::time_point deadline);
  // Leaves the cluster: adopts the current list without this node at `generation`, so that
  // every op is answered WrongOwner with it, and queues the job that gives every key away.
  void Leave(uint64_t generation);
  bool leaving() const { return leaving_.load(); }
  // Joins a running cluster whose list is `previous`: adopts `members` (which hold this node)
  // at `generation`, and waits, for each key it gains, for that key's owner under `previous`.
  std::optional<std::string> Join(std::vector<std::string> previous,
                                   std::vector<std::string> members, uint64_t generation);
  // Serves every key it owns now (a join that found nobody to wait for).
  void OpenGate();
  // A member's own announcement that it leaves, or joins, at `generation` (peers.h). It is
  // applied to this node's list, at a generation newer than both, rather than replacing it:
  // two nodes that leave (or join) at once are both applied, in either order, and neither
  // puts the other back. The keys this node gains from a leaver wait for its `done` at
  // `generation`. A joiner that is listed already (it restarted before anyone saw it go)
  // is sent `done` once every hand-off this node has queued has run. A leaving node applies
  // both to the list it hands its keys by. An error when it names this node.
  std::optional<std::string> MemberLeaves(const std::string& member, uint64_t generation);
  std::optional<std::string> MemberJoins(const std::string& member, uint64_t generation);
  // Ends the waits for `from`'s keys up to `generation`: its `done`, or a joiner's verdict
  // that `from` cannot be reached (its keys start fresh: the crash promise).
  void Handed(const std::string& from, uint64_t generation);
  // A member list found by DNS, corrected by what members announced in the last
  // kAnnouncedHoldMs: one that left is taken out, one that joined is put in. DNS lags behind
  // both (a terminating pod is still listed, a new one not yet), and must not undo them.
  std::vector<std::string> WithAnnounced(std::vector<std::string> discovered) const;
  // Whether `from` may hand this node keys of ring slot `slot`: it owned the slot in a list
  // this node held lately (or by its current list still owns it) and this node owns it now.
  // `known`: the current membership first, then the recent ones (KnownMemberships).
  bool MayHand(const std::string& from, uint32_t slot,
               const std::vector<std::shared_ptr<const Membership>>& known) const;
  // The current membership, then up to kRecentLists lists this node held before it (or joined
  // from), newest first.
  std::vector<std::shared_ptr<const Membership>> KnownMemberships() const;
  static constexpr size_t kRecentLists = 4;
  static constexpr int64_t kAnnouncedHoldMs = 5 * 60 * 1000;
  // Ring slots whose keys this node waits to be handed; 0: it serves every key it owns.
  int64_t waiting_slots() const { return pending_count_.load(std::memory_order_relaxed); }
  // Jobs queued or running; 0 once every key given up has been sent.
  int64_t handoffs_in_progress() const;

  // Replaces the gateway (or peer) secrets (a re-read secret file: rotation). Only a node
  // started with such a secret has any to replace; an empty set is ignored. Sessions that
  // proved a secret no longer in the set end at their next frame or the reaper's visit
  // (SessionValid). Thread-safe.
  // A set that shares a value with the other kind's is refused (the error says so) and the
  // node keeps the secrets it has.
  std::optional<std::string> SetSecrets(auth::Secrets secrets);
  std::optional<std::string> SetPeerSecrets(auth::Secrets secrets);
  // The gateway secret this node proves with (the first); empty: none.
  std::string current_secret() const;
  // The peer secret this node proves itself with to other nodes (the first); empty: none.
  std::string current_peer_secret() const;
  // Whether `token` is the admin token (auth::AdminToken) of one of the peer secrets; false
  // when the node has none. The admin port's actions (POST /drain) require it.
  bool AdminTokenValid(std::string_view token) const;
  bool requires_secret() const { return requires_secret_; }
  // Whether the node authenticates nobody (no secret, no peer credential): every session is
  // trusted with every op, as before roles existed. Only on loopback, or with --insecure.
  bool trusts_everyone() const { return trust_all_; }

  const NodeOptions& options() const { return options_; }
  // Null when this node names no region.
  RegionShares* regions() { return regions_.get(); }
  // What peers check before they take this node's keys or reports: its policy file's digest.
  uint64_t policy_digest() const { return policy_digest_; }
  int64_t NowMs() const { return clock_.NowMs(); }
  const PolicySet& policies() const { return policies_; }
  Store& store() { return store_; }

  // Name/value counters for the STATS op and limiterctl.
  std::vector<std::pair<std::string, int64_t>> Stats();
  // Prometheus text exposition of every counter.
  std::string RenderMetrics();

 private:
  struct OpResult;
  struct Entry;
  struct Ahead;
  enum class Gate { kProceed, kAnswered, kRefused };
  // Before a connection's peer has proved what it needs: a challenge for a nonce, the proof
  // checked (kProceed: the frame's ops may be handled, `node_proof` is the node's answer),
  // or an error reply (kRefused: close). Also a gateway session's hello that names a member
  // (peer_name): the step up to the peer role.
  Gate Authenticate(Worker& w, Session& session, const wire::Request& request,
                    std::vector<uint8_t>& out, std::optional<auth::Mac>& node_proof);
  // Whether the frame's hello asks for a handshake this session has not had.
  bool WantsHandshake(const Session& session, const wire::Request& request) const;
  // Why the session may not send `what`, a node-to-node op, speaking for `member` (null: it
  // names none), or nullopt when it may. Counts a refusal.
  std::optional<std::string> PeerOpRefusal(Worker& w, std::string_view what,
                                           const std::string* member);
  // The first bound the frame breaks, or nullopt.
  std::optional<std::string> FrameBoundError(const wire::Request& request) const;
  // Whether an op on a sub-bucket names a split its owner really made and still hands out;
  // when not, how the op fails and why: SplitChanged for a view that is out of date (on the
  // key's owner, with its split now put in r as any op on the key would get it; elsewhere, a
  // token that has lapsed), BadRequest for a token no member of the cluster made.
  struct SplitRefusal {
    wire::Status status;
    std::string why;
  };
  std::optional<SplitRefusal> SplitError(int policy, const Policy& p, std::string_view key,
                                         const wire::Op& op, const Membership& m, int64_t now,
                                         OpResult& r);
  // A token for a split view handed out now for `valid_ms`; empty without a secret.
  void SignSplit(const Policy& p, std::string_view key, uint16_t k, uint32_t epoch,
                 int64_t valid_ms, OpResult& r);
  void HandleOp(Worker& w, const wire::Op& op, const Membership& m, int64_t now, OpResult& r);
  // The policy and id of the op's first limit, worked out before the op is handled so that
  // the key's slot can be prefetched meanwhile (Store::Prefetch); Resolve takes them from
  // w.ahead instead of working them out again. Empty for an op Resolve would refuse or
  // resolve another way (a sub-bucket).
  Ahead Lookahead(const wire::Op& op) const;
  // The reply of one handled op, appended to the worker's replies.
  void EncodeReply(Worker& w, const wire::Op& op, const Membership& m, OpResult& r);
  enum class CostUse { kCharge, kUnits, kNone };
  // Fills w.entries with the op's limits and their ancestors; a global limit gets this
  // region's share (RegionShares::Use), counting the units the op asks for as its demand.
  bool Resolve(Worker& w, const wire::Op& op, const Membership& m, bool single,
               CostUse cost_use, int64_t now, OpResult& r);
  // REGIONS: a report from another region, or a question about this region's shares.
  void RegionsOp(Worker& w, const wire::Op& op, const Membership& m, int64_t now, OpResult& r);
  // A global key's state moved to its region's share in force (RegionShares::Reconcile), once
  // the op has room reserved: the moved state is then saved, decided or not.
  void ReconcileShares(Worker& w);
  // `now` is the node's clock; each key's state runs on its entry's (Entry::now: its
  // policy's clock).
  void Check(Worker& w, bool dry_run, int64_t now, OpResult& r);
  void Lease(Worker& w, int64_t units, int64_t now, OpResult& r);
  void Return(Worker& w, int64_t units, uint64_t lease_id, int64_t leased_at, int64_t now,
              OpResult& r);
  void Inspect(Worker& w, int64_t now, OpResult& r);
  bool Save(Worker& w, const Store::StripeLock& lock);
  void CollectStripes(Worker& w);
  // False, with r failed and every state given back, when a durable key's record cannot be
  // read.
  bool Load(Worker& w, OpResult& r);
  // Queues a durable entry's state (or its erasure) in the database: its stripe locked.
  void Persist(Worker& w, const Entry& e, const KeyLimiter& state);
  // With the entries' stripes locked, before an admission or a grant changes them: each
  // entry's charge in effect (of policies a lease can charge); and after it is saved, the
  // lease books of those that have one learn it.
  void NoteInEffect(Worker& w);
  void ClampBooks(Worker& w);
  void Count(Worker& w, int type, Outcome outcome);
  // With the entries' stripes locked: true when one of the op's own limits is split, and r
  // then carries the split instead of a decision.
  bool RedirectToSplit(Worker& w, int64_t now, OpResult& r);
  void SplitInfo(Worker& w, int64_t reported, int64_t now, OpResult& r);
  // Puts a view of `split` valid for `valid_ms` in r's reply (signed), for the key itself.
  void PutSplit(const Policy& p, std::string_view key, const Store::Split& split,
                int64_t valid_ms, int64_t now, OpResult& r);
  // How long one more client may use `split`'s sub-buckets (extending it unless it is
  // merging), or nullopt when it has just reopened (drained and erased). Stripe locked.
  std::optional<int64_t> HandOutView(int policy, const KeyId& id, Store::Split& split,
                                     int64_t now);
  void Record(Worker& w, bool denied);  // samples the op's limits into the hot-key sketch
  bool Splittable(int policy) const;
  int64_t ReopenMarginMs() const;  // after a merging split's last view lapses
  void StartSplit(int policy, const std::string& key, int64_t rate, int64_t now);
  // With the key's stripe locked: the key's slot holds a drained state.
  void Drain(int policy, const KeyId& id, int64_t now);
  // Hand-off: the Members and Handoff ops; a ring change's jobs and waits; the deadline.
  // Their payload is the frame's (wire::Request::peer), null when it has none.
  void MembersOp(Worker& w, OpResult& r);
  void HandoffOp(Worker& w, int64_t now, OpResult& r);
  // Regions: null without a region. global_: per policy, scope: global (with regions).
  std::unique_ptr<RegionShares> regions_;
  std::vector<bool> global_;
  // Makes `next` the membership if it is newer than the current one (else nothing): the keys
  // it moves away are queued as a job, those it brings wait for their owner under `before`
  // (the current ring when null). False when `next` was not newer.
  // The waits it makes end with a `done` at `wait_generation` (next's when 0). Called with
  // change_mu_ held.
  bool Adopt(const Ring* before, std::shared_ptr<const Membership> next,
             uint64_t wait_generation = 0);
  // A leaving node's new list to hand its keys by (it serves nothing whatever the list):
  // queues a job for what it still holds. Called with change_mu_ held.
  void Rehome(std::shared_ptr<const Membership> next);
  void ExpireWaits(int64_t now);
  bool Waiting(uint32_t slot) const {
    return pending_count_.load(std::memory_order_relaxed) != 0 &&
           pending_[slot].load(std::memory_order_relaxed) != 0;
  }
  uint64_t PolicyDigest() const;

  const PolicySet& policies_;
  const Clock& clock_;
  const NodeOptions options_;
  Store store_;
  std::unique_ptr<DurableStore> durable_;
  std::vector<bool> durable_policy_;  // per policy: durable, and this node has a database
  bool calendars_ = false;            // some policy runs on a calendar
  std::unordered_map<std::string_view, int> policy_index_;
  SharedValue<const Membership> membership_;
  const bool requires_secret_;
  const bool has_peer_secret_;
  const bool trust_all_;  // no credential of any kind: every session may do everything
  SharedValue<const auth::Secrets> secrets_;
  SharedValue<const auth::Secrets> peer_secrets_;
  // Bumped whenever either set changes: a session rechecks its secret when it differs.
  std::atomic<uint64_t> secrets_version_{1};
  // Lease ids: from a random start each life, so that a lease granted before a restart is
  // never mistaken for one granted after it.
  std::atomic<uint64_t> next_lease_id_;
  const int64_t started_ms_;
  std::vector<bool> parents_;  // per policy: some policy nests under it
  std::vector<bool> leased_;   // per policy: a LEASE can charge it (lease mode, or an ancestor)
  // Per policy, the sub-buckets' rates at the configured split k (SubRate); empty when the
  // policy cannot split. Computed once: every op on a split key needs its share.
  std::vector<std::vector<Rate>> sub_rates_;
  std::atomic<uint32_t> split_epoch_{0};

  mutable std::mutex hot_mu_;
  std::vector<HotKey> hot_keys_;  // guarded by hot_mu_
  uint64_t frames_at_tick_ = 0;   // guarded by hot_mu_ (Tick only)
  int64_t last_tick_ms_ = 0;      // guarded by hot_mu_

  std::mutex workers_mu_;
  std::vector<std::unique_ptr<Worker>> workers_;  // guarded by workers_mu_ (the vector only)

  // Hand-off. pending_[slot]: 0, or 1 + the index in waits_ of the member whose done the
  // slot's keys wait for (kAnySource: any, the join gate); written under handoff_mu_, read
  // by every worker (Waiting).
  static constexpr uint8_t kAnySource = 255;
  std::unique_ptr<std::atomic<uint8_t>[]> pending_;
  std::atomic<int64_t> pending_count_{0};
  std::atomic<bool> leaving_{false};
  // One member-list change at a time (SetMembers, Leave, Join, MemberLeaves, MemberJoins):
  // each is computed from the list before it. Taken before handoff_mu_.
  std::mutex change_mu_;
  mutable std::mutex handoff_mu_;
  std::condition_variable jobs_cv_;
  struct Wait {
    std::string from;
    uint64_t generation = 0;  // done for this generation or a later one ends the wait
  };
  std::vector<Wait> waits_;                               // guarded by handoff_mu_
  std::unordered_map<std::string, uint64_t> handed_;      // member -> latest done; handoff_mu_
  // Members announced gone (false) or come (true), and when (node clock); handoff_mu_.
  std::unordered_map<std::string, std::pair<bool, int64_t>> announced_;
  int64_t waits_until_ms_ = 0;                            // guarded by handoff_mu_
  std::deque<HandoffJob> jobs_;                           // guarded by handoff_mu_
  // Lists this node held before the current one, newest first (at most kRecentLists): a
  // hand-off is taken only from a member that owned the slots in one of them. handoff_mu_.
  std::deque<std::shared_ptr<const Membership>> recent_;
  // Makes `next` the membership, remembering the one it replaces; with handoff_mu_ held.
  void Publish(std::shared_ptr<const Membership> next);
  void RememberLocked(std::shared_ptr<const Membership> list);
  int64_t jobs_running_ = 0;                              // guarded by handoff_mu_
  const uint64_t policy_digest_;

 public:
  // Hand-off counters, for /metrics and STATS.
  // Written by any thread (workers import, the hand-off thread exports).
  struct HandoffCounters {
    std::atomic<int64_t> keys_sent{0}, keys_lost{0}, keys_received{0}, keys_refused{0},
        splits_received{0}, waits_expired{0}, jobs{0}, refused_batches{0};
  };
  HandoffCounters& handoff_counters() { return handoff_counters_; }

 private:
  HandoffCounters handoff_counters_;
};

}  // namespace limiter
