// The gateway client library: one question per request, "may this request go ahead?",
// answered within a deadline whatever the cluster is doing.
//
// A Client routes each key to the shard node that owns it (the same ring every node
// derives from the same member list), spends tokens leased in batches from local buckets
// (so the nodes see a fraction of the traffic while the limit stays strict), and, when a
// node is slow or down, falls back per class of limit: security to a strict local limit (or
// deny), contract to a local bucket at L/N, billing fails open and reconciles later,
// capacity to a local load shedder.
//
// Thread-safety: a Client is safe to use from any number of threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "limiter/status.h"

namespace limiter::client {

struct Request {
  std::string_view policy = {};
  std::string_view key = {};
  std::string_view tenant = {};     // needed when the policy nests under a tenant (parent:)
  std::string_view operation = {};  // the policy's cost for this operation; empty: `cost`
  int64_t cost = 1;
};

// Where a decision came from.
enum class Source : uint8_t {
  kStore,     // the owner node answered within the deadline
  kLease,     // spent from units already leased from the owner
  kFallback,  // the owner was slow or down: the policy's class decided
};
std::string_view SourceName(Source source);

// Decision::retry_after of a request that can never be admitted (its cost is above what the
// limit can ever hold).
inline constexpr std::chrono::milliseconds kRetryNever = std::chrono::milliseconds::max();

// A held slot of a capacity limit's local shedder (only for capacity-class fallback
// decisions); the slot is freed when the Permit is destroyed, so keep it for as long as the
// request runs.
class Permit {
 public:
  Permit() = default;
  explicit Permit(std::function<void()> release) : release_(std::move(release)) {}
  Permit(Permit&& other) noexcept : release_(std::move(other.release_)) { other.release_ = {}; }
  Permit& operator=(Permit&& other) noexcept {
    Reset();
    release_ = std::move(other.release_);
    other.release_ = {};
    return *this;
  }
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit() { Reset(); }
  explicit operator bool() const { return static_cast<bool>(release_); }
  void Reset() {
    if (release_) std::exchange(release_, {})();
  }

 private:
  std::function<void()> release_;
};

struct Decision {
  bool allowed = false;
  // The policy that decided (the denying one when denied); points into the client's policy
  // set, valid for as long as the Client.
  std::string_view policy;
  int64_t limit = 0;      // its L
  int64_t window_ms = 0;  // its W
  int64_t remaining = 0;  // units left, as far as this gateway knows
  std::chrono::milliseconds retry_after{0};
  std::chrono::milliseconds reset{0};
  Source source = Source::kStore;
  std::string error;  // a bad request (unknown policy, missing tenant...): denied
  Permit permit;
};

struct Options {
  // The nodes: host:port each; or one DNS name:port whose addresses are the nodes (a
  // Kubernetes headless service), resolved again every dns_refresh.
  std::vector<std::string> members;
  // The generation of `members`: the client adopts a member list from a node only when its
  // generation is larger (a node with an older list cannot take it back). Give the nodes'
  // --generation. With members_dns, the generation is the time of the DNS answer.
  uint64_t members_generation = 0;
  std::string members_dns;
  std::chrono::milliseconds dns_refresh{5000};
  // The policy file the nodes load (the same file).
  std::string policy_file;
  // The most a store call may take; beyond it the decision falls back.
  std::chrono::microseconds deadline{2000};
  // N, the number of gateways: a contract limit falls back to L/N on each.
  int gateways = 1;
  std::string name = "gateway";
  // The cluster secret, when the nodes require one: read from `secret_file`, else from
  // $LIMITER_SECRET_FILE, else $LIMITER_SECRET (the first line of a file is the one used).
  // Never pass it on a command line. Empty everywhere: no secret.
  std::string secret_file;
  // TLS to the nodes: on when tls_ca_file (the CA that signed the nodes) is given; with
  // tls_cert_file and tls_key_file, this gateway's certificate for nodes that require one.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;

  // Billing debts: while a billing key's owner is away, requests are admitted and their units
  // owed to it, merged per key, and leased back from the owner once it returns. At most this
  // many keys owe units at once; beyond it a request of another key is still admitted, but
  // its units are not recorded (counters().billing_debt_units_dropped). A debt takes about
  // 250 bytes and its key and tenant (at most 256 bytes each): 100,000 debts of 40-byte keys
  // about 30 MB, and never more than about 80 MB. 0: no debt is recorded.
  size_t max_billing_debts = 100'000;
  // A file that keeps the debts across a crash of this process; empty: in memory only. Every
  // change to a debt is appended (write(2)) before the decision returns, so a gateway killed
  // with SIGKILL and started again with the same path pays what it owed, to the owners its
  // ring names then. Create fails when the file is malformed (the message names the offset)
  // or another process has it open. The file is rewritten when it grows to several times
  // what the debts need (into "<path>.tmp", renamed over it). One writer: the process holds
  // an flock on the open file (mode 0600).
  std::string billing_journal;
  // fdatasync of the journal at most this often, off the request path: a machine crash loses
  // at most the debt changes of the last interval (and of one sync). 0: never (the OS writes
  // back when it will, on Linux within about 30 s).
  std::chrono::milliseconds billing_journal_sync{100};
};

// What the client has done, for a gateway to publish as metrics.
struct Counters {
  uint64_t decisions = 0;
  uint64_t allowed = 0;
  uint64_t denied = 0;
  uint64_t by_source[3] = {};          // Source order
  uint64_t fallback_by_class[4] = {};  // security, contract, billing, capacity
  uint64_t store_calls = 0;            // CHECK, LEASE and RETURN ops sent
  uint64_t store_errors = 0;           // deadline misses and connection failures
  uint64_t deadline_misses = 0;
  uint64_t wrong_owner = 0;
  uint64_t split_redirects = 0;  // a key's owner said it is split (hot keys)
  // A sub-bucket said this gateway's view of its split is out of date (the key merged or
  // split again, a lapsed token, a refusal): the view was refreshed from the owner and the
  // request tried once more within its deadline.
  uint64_t split_changed = 0;
  // Requests of a split key that the policy's class decided because the split could not
  // answer: it changed again, the key was between two views while merging back, or a
  // sub-bucket's node could not answer for it (moving, another ring).
  uint64_t split_fallbacks = 0;
  // Requests that waited (within their deadline) for a sub-bucket that may be new to refill:
  // a new sub-bucket starts drained, for about a millisecond at high rates.
  uint64_t split_waits = 0;
  // Denials by a sub-bucket that may be new (it starts drained) where no wait for it fitted
  // in the deadline, or where the try after the wait was denied too: the only way a split
  // key within its limit is denied (round trips near half the deadline).
  uint64_t split_waits_missed = 0;
  uint64_t leases = 0;
  uint64_t units_leased = 0;
  uint64_t units_expired = 0;
  uint64_t units_returned = 0;
  // Leases answered after their deadline (the requests had fallen back): their units were
  // charged at the owner, so they were kept for the requests that came next.
  uint64_t late_grants_kept = 0;
  uint64_t nodes_down = 0;     // nodes marked down right now
  uint64_t rings_adopted = 0;  // newer member lists adopted (from nodes or DNS)
  // Memory: local buckets and fallback limiters held now. Idle ones are dropped as new keys
  // come, so these follow the keys in use rather than every key ever seen.
  uint64_t local_buckets = 0;
  uint64_t fallback_limiters = 0;
  // Billing debts: units admitted while their owner was away, owed until leased back.
  uint64_t billing_debts = 0;            // keys that owe units now (Options::max_billing_debts)
  uint64_t billing_debt_units = 0;       // units owed now
  uint64_t billing_debt_units_paid = 0;  // leased back from their owners
  // Units admitted that will never be charged (the sum), and by reason: [0] no room to
  // record them (a new key while max_billing_debts keys owe units); [1] a replayed journal's
  // debt whose policy is gone from the policy file, or now needs a tenant it does not name;
  // [2] the owner refused the lease (the policy is strict there).
  uint64_t billing_debt_units_dropped = 0;
  uint64_t billing_debt_units_dropped_by_reason[3] = {};
  uint64_t billing_journal_errors = 0;    // failed writes, syncs and rewrites (each logged)
  uint64_t billing_journal_rewrites = 0;  // compactions, and the one at start
};

class Client {
 public:
  // The client, or why the options cannot work (bad policy file, no members, a malformed
  // billing journal).
  static Result<std::unique_ptr<Client>> Create(const Options& options);
  virtual ~Client() = default;

  // Blocks for at most about the deadline.
  virtual Decision Decide(const Request& request) = 0;
  // `done` runs exactly once, on the calling thread when the answer is local, else on the
  // client's I/O thread; it must not block. The request's strings are copied.
  virtual void DecideAsync(const Request& request, std::function<void(Decision)> done) = 0;

  virtual Counters counters() const = 0;
  // Gives unspent leased units back to their nodes; later decisions still work.
  virtual void ReturnLeases() = 0;
};

}  // namespace limiter::client
