// billing_gateway: a gateway process for the billing journal's integration test
// (test/integration/billing_journal_integration_test.cc), on the public client API only.
//
//   billing_gateway --policies FILE --members HOST:PORT[,...] --journal PATH
//                   [--policy P --keys K --each N --cost C] [--until-paid]
//
// Creates a client with the journal, decides N requests of cost C for each of keys acct-0 to
// acct-(K-1), then prints "admitted UNITS" (or "denied KEY" and exits 3 if one is denied).
// With --until-paid it then waits (at most 60 s) until it owes nothing and prints
// "paid UNITS dropped UNITS", exiting 0 (4 if debts are left); without, it stays until it is
// killed. A client that cannot be created: "error: MESSAGE", exit 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "limiter/client/client.h"
#include "test/support/wait.h"

int main(int argc, char** argv) {
  namespace client = limiter::client;
  client::Options o;
  std::string policy = "usage";
  int keys = 0, each = 0;
  int64_t cost = 1;
  bool until_paid = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "billing_gateway: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--policies") {
      o.policy_file = next();
    } else if (a == "--members") {
      std::istringstream list(next());
      for (std::string m; std::getline(list, m, ',');) o.members.push_back(m);
    } else if (a == "--journal") {
      o.billing_journal = next();
    } else if (a == "--policy") {
      policy = next();
    } else if (a == "--keys") {
      keys = std::stoi(next());
    } else if (a == "--each") {
      each = std::stoi(next());
    } else if (a == "--cost") {
      cost = std::stoll(next());
    } else if (a == "--until-paid") {
      until_paid = true;
    } else {
      std::fprintf(stderr, "billing_gateway: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  o.deadline = std::chrono::milliseconds(50);  // sanitizer builds are slow
  limiter::Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
  if (!created.ok()) {
    std::printf("error: %s\n", created.error().c_str());
    return 1;
  }
  std::unique_ptr<client::Client> c = std::move(created).value();
  int64_t admitted = 0;
  for (int k = 0; k < keys; ++k) {
    const std::string key = "acct-" + std::to_string(k);
    for (int n = 0; n < each; ++n) {
      if (!c->Decide({.policy = policy, .key = key, .cost = cost}).allowed) {
        std::printf("denied %s\n", key.c_str());
        return 3;
      }
      admitted += cost;
    }
  }
  std::printf("admitted %lld\n", static_cast<long long>(admitted));
  std::fflush(stdout);
  if (!until_paid) {
    for (;;) ::pause();  // until killed
  }
  client::Counters counters;
  limiter::testing::WaitUntil(
      [&] {
        counters = c->counters();
        return counters.billing_debts == 0;
      },
      std::chrono::seconds(60));
  std::printf("paid %llu dropped %llu\n",
              static_cast<unsigned long long>(counters.billing_debt_units_paid),
              static_cast<unsigned long long>(counters.billing_debt_units_dropped));
  std::fflush(stdout);
  return counters.billing_debts == 0 ? 0 : 4;
}
