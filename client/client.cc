// client::Client::Create: the real client, a ClientCore over an asio thread and TCP.
#include <asio.hpp>
#include <condition_variable>
#include <future>
#include <optional>
#include <thread>

#include "client/asio_scheduler.h"
#include "client/billing_journal.h"
#include "client/client_core.h"
#include "client/tcp_transport.h"
#include "common/member_list.h"
#include "common/mutex.h"
#include "common/policy_file.h"
#include "protocol/node_access.h"

namespace limiter::client {
namespace {

class RealClient final : public Client {
 public:
  RealClient(PolicySet policies, std::vector<std::string> members, const Options& options,
             NodeAccess access)
      : transport_(scheduler_.io(), std::move(access)),
        core_(std::move(policies), std::move(members), scheduler_, transport_,
              CoreOptions(options)),
        dns_(options.members_dns),
        dns_refresh_(options.dns_refresh) {
    core_.WarmUp();
    if (!dns_.empty()) {
      resolver_ = std::thread([this] {
        MutexLock lock(mu_);
        while (!stopping_) {
          if (cv_.WaitFor(lock, dns_refresh_, [this] {
                mu_.AssertHeld();
                return stopping_;
              })) {
            break;
          }
          lock.Unlock();
          Result<std::vector<std::string>> members = ResolveMembers(dns_);
          if (members) core_.SetMembers(std::move(members).value(), DnsGeneration());
          lock.Lock();
        }
      });
    }
  }

  ~RealClient() override {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.NotifyAll();
    if (resolver_.joinable()) resolver_.join();
    ReturnLeases();
    // Connections belong to the I/O thread: close them there as its last handler, so that
    // nothing reopens one (a probe, a retry) and the members destroyed next never race with
    // a handler.
    scheduler_.RunAndStop([this] { transport_.CloseAll(); });
  }

  Decision Decide(const Request& request) override { return core_.Decide(request); }
  void DecideAsync(const Request& request, std::function<void(Decision)> done) override {
    core_.DecideAsync(request, std::move(done));
  }
  Counters counters() const override { return core_.counters(); }
  Status RestoreBillingDebts(BillingJournal::Replay replay) {
    return core_.RestoreBillingDebts(std::move(replay));
  }
  void ReturnLeases() override {
    std::promise<void> returned;
    core_.ReturnLeases([&returned] { returned.set_value(); });
    returned.get_future().wait();  // every RETURN ends within the deadline
  }

 private:
  static ClientCoreOptions CoreOptions(const Options& o) {
    ClientCoreOptions c;
    c.deadline_us = o.deadline.count();
    c.gateways = o.gateways;
    c.generation = o.members_dns.empty() ? o.members_generation : DnsGeneration();
    c.max_billing_debts = o.max_billing_debts;
    return c;
  }

  AsioScheduler scheduler_;
  TcpTransport transport_;
  ClientCore core_;
  const std::string dns_;
  const std::chrono::milliseconds dns_refresh_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ LIMITER_GUARDED_BY(mu_) = false;
  std::thread resolver_;
};

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(const Options& options) {
  if (options.policy_file.empty()) return Error{"no policy file (Options::policy_file)"};
  Result<PolicySet> policies = LoadPolicyFile(options.policy_file);
  if (!policies) return policies.status();
  std::vector<std::string> members = options.members;
  if (!options.members_dns.empty()) {
    Result<std::vector<std::string>> resolved = ResolveMembers(options.members_dns);
    if (!resolved) return Error{"members_dns: " + resolved.error()};
    members = std::move(resolved).value();
  }
  if (members.empty()) return Error{"no members: give Options::members or members_dns"};
  for (const std::string& m : members) {
    Result<std::vector<std::string>> one = ParseMemberList(m);
    if (!one) return one.status();
  }
  if (options.deadline.count() <= 0) return Error{"the deadline must be positive"};
  if (options.gateways < 1) return Error{"gateways must be at least 1"};
  const TlsOptions tls{options.tls_cert_file, options.tls_key_file, options.tls_ca_file, {}};
  Result<NodeAccess> access = LoadNodeAccess(options.secret_file, tls);
  if (!access) return access.status();
  if (options.billing_journal_sync.count() < 0) {
    return Error{"billing_journal_sync must not be negative"};
  }
  // The journal first: a malformed one or one in use stops the client before it starts.
  std::optional<BillingJournal::Replay> replay;
  if (!options.billing_journal.empty()) {
    BillingJournalOptions j;
    j.sync_interval_ms = options.billing_journal_sync.count();
    Result<BillingJournal::Replay> opened = BillingJournal::Open(options.billing_journal, j);
    if (!opened) return opened.status();
    replay = std::move(opened).value();
  }
  auto client = std::make_unique<RealClient>(std::move(policies).value(), std::move(members),
                                             options, std::move(access).value());
  if (replay) {
    if (Status s = client->RestoreBillingDebts(std::move(*replay)); !s.ok()) return s;
  }
  return std::unique_ptr<Client>(std::move(client));
}

}  // namespace limiter::client
