// limiterctl check --cluster: decisions through the gateway library, as a gateway makes them.
#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>
#include <vector>

#include "client/ctl/commands.h"
#include "common/member_list.h"
#include "common/mutex.h"
#include "limiter/client/client.h"

namespace limiter::ctl {

int RunClusterCheck(const CheckArgs& args, std::ostream& out, std::ostream& err) {
  if (args.policy_file.empty()) {
    err << "limiterctl check: --cluster needs --policy-file (the file the nodes load)\n";
    return 2;
  }
  if (args.rate < 0) {
    err << "limiterctl check: --rate must be positive\n";
    return 2;
  }
  if (!(args.deadline_ms >= 0.001 && args.deadline_ms <= 60'000)) {
    err << "limiterctl check: --deadline-ms must be between 0.001 and 60000\n";
    return 2;
  }
  Result<std::vector<std::string>> members = ParseMemberList(args.cluster);
  if (!members) {
    err << "limiterctl check: --cluster: " << members.error() << '\n';
    return 2;
  }
  client::Options options;
  options.members = std::move(members).value();
  options.policy_file = args.policy_file;
  options.gateways = args.gateways;
  options.deadline = std::chrono::microseconds(static_cast<int64_t>(args.deadline_ms * 1000));
  options.name = "limiterctl";
  options.secret_file = args.secret_file;
  options.tls_ca_file = args.tls.ca_file;
  options.tls_cert_file = args.tls.cert_file;
  options.tls_key_file = args.tls.key_file;
  Result<std::unique_ptr<client::Client>> created = client::Client::Create(options);
  if (!created) {
    err << "limiterctl check: " << created.error() << '\n';
    return 1;
  }
  std::unique_ptr<client::Client> c = std::move(created).value();
  std::atomic<int64_t> next{0}, allowed{0}, denied{0}, errors{0};
  std::array<std::atomic<int64_t>, 3> by_source{};
  std::string first_error;
  Mutex first_error_mu;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < args.concurrency; ++t) {
    threads.emplace_back([&] {
      for (int64_t i = next++; i < args.count; i = next++) {
        if (args.rate > 0) {
          // Open loop: decision i is due at i / rate seconds.
          std::this_thread::sleep_until(
              start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(static_cast<double>(i) / args.rate)));
        }
        const client::Decision d = c->Decide(
            {args.policy, args.key, args.tenant, args.op, args.op.empty() ? args.cost : 1});
        if (!d.error.empty()) {
          ++errors;
          MutexLock lock(first_error_mu);
          if (first_error.empty()) first_error = d.error;
          continue;
        }
        ++(d.allowed ? allowed : denied);
        ++by_source[static_cast<size_t>(d.source)];
      }
    });
  }
  for (auto& t : threads) t.join();
  // What the key's split (hot keys) cost the decisions, when it was split.
  const client::Counters counters = c->counters();
  if (args.json) {
    out << nlohmann::ordered_json{{"allowed", allowed.load()},
                                  {"denied", denied.load()},
                                  {"errors", errors.load()},
                                  {"by_source",
                                   {{"store", by_source[0].load()},
                                    {"lease", by_source[1].load()},
                                    {"fallback", by_source[2].load()}}},
                                  {"split",
                                   {{"redirects", counters.split_redirects},
                                    {"changed", counters.split_changed},
                                    {"waits", counters.split_waits},
                                    {"waits_missed", counters.split_waits_missed},
                                    {"fallbacks", counters.split_fallbacks}}},
                                  {"deadline_misses", counters.deadline_misses}}
               .dump()
        << '\n';
  } else {
    out << "allowed " << allowed << "  denied " << denied << "  errors " << errors << "  (store "
        << by_source[0] << ", lease " << by_source[1] << ", fallback " << by_source[2] << ")\n";
    if (counters.split_redirects > 0) {
      out << "split: redirects " << counters.split_redirects << ", changed "
          << counters.split_changed << ", waits " << counters.split_waits << " ("
          << counters.split_waits_missed << " missed), fallbacks " << counters.split_fallbacks
          << "; deadline misses " << counters.deadline_misses << "\n";
    }
  }
  if (!first_error.empty()) err << "limiterctl check: " << first_error << '\n';
  return errors > 0 ? 1 : 0;
}

}  // namespace limiter::ctl
