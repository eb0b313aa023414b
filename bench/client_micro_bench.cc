// BM_Decide_Leased: one decision on a warm lease through the gateway library, the path
// every request of a lease-mode key takes. The owner is a Node in this process, reached
// through a transport that calls it on the client's I/O thread, so refills are real but
// cost no network.
//
// BM_Decide_Strict: one decision of a strict-mode key: resolved, routed, sent to the owner
// (the same in-process Node, on the client's I/O thread) and answered; the gateway's own
// cost is the whole less Node::HandleFrame (callgrind: docs/benchmarks/micro.md).
//
// BM_Billing_Owe/journal:0|1: a billing request decided while its owner is away: the
// fallback admits it and adds its units to the key's debt, in memory only (0) or also
// appended to the billing journal (1: one write(2) under the debts' lock, the journal's
// thread syncing every 100 ms and compacting), in the temp dir.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/asio_scheduler.h"
#include "client/billing_journal.h"
#include "client/client_core.h"
#include "client/fallbacks.h"
#include "client/request_resolver.h"
#include "common/policy_file.h"
#include "protocol/frame_codec.h"
#include "protocol/op.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "server/node.h"

namespace limiter {
namespace {

// Calls a Node directly, on the scheduler's thread.
class InProcessTransport final : public Transport {
 public:
  explicit InProcessTransport(Node& node) : node_(node), worker_(node.AddWorker()) {}
  void Send(const std::string&, OpSpec op, Callback done) override {
    builder_.Clear();
    AddOp(builder_, 1, op);
    out_.clear();
    node_.HandleFrame(worker_, builder_.Finish(), out_);
    CallResult result;
    result.answer =
        FromWire(*VerifiedReply(DecodeFrame(out_, 64u << 20).body, aligned_)->ops()->Get(0));
    done(std::move(result));
  }
  void Disconnect(const std::string&) override {}

 private:
  Node& node_;
  Node::Worker& worker_;
  RequestBuilder builder_;
  std::vector<uint8_t> out_;
  std::vector<uint64_t> aligned_;
};

struct Fixture {
  Fixture() {
    Result<PolicySet> p = ParsePolicies(R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 1000000000, window: 1s, class: contract,
     lease: {size: 10000}}
  - {name: strict_api, algorithm: token_bucket, limit: 1000000000, window: 1s,
     class: contract, mode: strict}
)",
                                        "bench.yaml");
    policies = std::move(p).value();
    node = std::make_unique<Node>(policies, clock, NodeOptions{});
    transport = std::make_unique<InProcessTransport>(*node);
    core = std::make_unique<ClientCore>(policies, std::vector<std::string>{"node:1"}, scheduler,
                                        *transport, ClientCoreOptions{});
  }
  ~Fixture() { scheduler.Stop(); }
  SteadyClock clock;
  PolicySet policies;
  std::unique_ptr<Node> node;
  AsioScheduler scheduler;
  std::unique_ptr<InProcessTransport> transport;
  std::unique_ptr<ClientCore> core;
};

Fixture& Shared() {
  static Fixture* f = new Fixture();  // shared by the threads of a run; never destroyed
  return *f;
}

void DecideLeased(benchmark::State& state) {
  Fixture& f = Shared();
  // Each thread has keys of its own, as gateway threads serving different clients do.
  std::vector<std::string> keys;
  for (int k = 0; k < 16; ++k) {
    keys.push_back("key-" + std::to_string(state.thread_index()) + "-" + std::to_string(k));
  }
  for (const std::string& k : keys) f.core->Decide({"api", k});  // warm: leases are taken
  int64_t allowed = 0;
  size_t next = 0;
  for (auto _ : state) {
    client::Decision d = f.core->Decide({"api", keys[next++ & 15]});
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  if (allowed != static_cast<int64_t>(state.iterations()))
    state.SkipWithError("a decision was denied");
}

BENCHMARK(DecideLeased)->Name("BM_Decide_Leased")->Threads(1)->Threads(2)->UseRealTime();

void DecideStrict(benchmark::State& state) {
  Fixture& f = Shared();
  std::vector<std::string> keys;
  for (int k = 0; k < 16; ++k) {
    keys.push_back("strict-" + std::to_string(state.thread_index()) + "-" + std::to_string(k));
  }
  int64_t allowed = 0;
  size_t next = 0;
  for (auto _ : state) {
    client::Decision d = f.core->Decide({"strict_api", keys[next++ & 15]});
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  if (allowed != static_cast<int64_t>(state.iterations()))
    state.SkipWithError("a decision was denied");
}

BENCHMARK(DecideStrict)->Name("BM_Decide_Strict")->Threads(1)->UseRealTime();

struct BillingFixture {
  explicit BillingFixture(bool journaled)
      : policies(std::move(ParsePolicies(R"(
policies:
  - {name: usage, algorithm: token_bucket, limit: 1000000, window: 1h, class: billing}
)",
                                         "bench.yaml"))
                     .value()),
        resolver(policies),
        fallbacks(std::make_unique<Fallbacks>(policies, 1, 1000, 100'000, scheduler, counters)) {
    if (!journaled) return;
    path = "/tmp/limiter_bench_billing_" + std::to_string(::getpid()) + ".journal";
    std::remove(path.c_str());
    Result<BillingJournal::Replay> r = BillingJournal::Open(path);
    LIMITER_CHECK(r.ok(), "BM_Billing_Owe: cannot open " + path + ": " + r.error());
    const Status restored = fallbacks->RestoreDebts(
        std::move(r).value(),
        [](const Policy&, std::string_view, std::string_view) { return std::string("node:1"); });
    LIMITER_CHECK(restored.ok(), "BM_Billing_Owe: cannot open " + path + ": " + restored.error());
  }
  ~BillingFixture() {
    fallbacks.reset();  // its journal's thread first
    scheduler.Stop();
    if (!path.empty()) {
      for (const char* suffix : {"", ".lock"}) std::remove((path + suffix).c_str());
    }
  }
  PolicySet policies;
  RequestResolver resolver;
  AsioScheduler scheduler;
  ClientCounters counters;
  std::unique_ptr<Fallbacks> fallbacks;
  std::string path;
};

BillingFixture* billing = nullptr;

void BillingOwe(benchmark::State& state) {
  std::vector<std::string> keys;
  std::vector<ResolvedRequest> requests(16);
  for (int k = 0; k < 16; ++k) {
    keys.push_back("acct-" + std::to_string(state.thread_index()) + "-" + std::to_string(k));
  }
  for (int k = 0; k < 16; ++k) {
    const Status resolved = billing->resolver.Resolve({"usage", keys[k]}, requests[k]);
    LIMITER_CHECK(resolved.ok(), resolved.error());
  }
  int64_t allowed = 0;
  size_t next = 0;
  for (auto _ : state) {
    billing->fallbacks->Decide(requests[next++ & 15], "node:1",
                               [&](client::Decision d) { allowed += d.allowed; });
  }
  state.SetItemsProcessed(state.iterations());
  if (allowed != static_cast<int64_t>(state.iterations()))
    state.SkipWithError("a decision was denied");
}

BENCHMARK(BillingOwe)
    ->Name("BM_Billing_Owe")
    ->ArgName("journal")
    ->Arg(0)
    ->Arg(1)
    ->Setup([](const benchmark::State& s) { billing = new BillingFixture(s.range(0) == 1); })
    ->Teardown([](const benchmark::State&) {
      delete billing;
      billing = nullptr;
    })
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

}  // namespace
}  // namespace limiter
