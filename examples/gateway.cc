// The README's gateway example, built with the project so that it keeps compiling.
// Usage: gateway_example POLICY_FILE HOST:PORT[,HOST:PORT...] API_KEY TENANT
#include <iostream>
#include <string>
#include <utility>

#include "limiter/client/client.h"
#include "limiter/client/http.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: gateway_example POLICY_FILE HOST:PORT[,...] API_KEY TENANT\n";
    return 2;
  }
  limiter::client::Options options;
  options.policy_file = argv[1];  // the file the nodes load
  options.members = {argv[2]};    // or members_dns = "limiterd.ns.svc:7450"
  options.gateways = 40;          // contract limits fall back to L/40 each
  auto created = limiter::client::Client::Create(options);  // the client, or why not
  if (!created.ok()) {
    std::cerr << created.error() << '\n';
    return 1;
  }
  auto limiter = std::move(created).value();  // std::unique_ptr<limiter::client::Client>
  // Per request: one call, answered within the deadline (2 ms) whatever the cluster does.
  limiter::client::Decision d = limiter->Decide(
      {.policy = "api_key", .key = argv[3], .tenant = argv[4], .operation = "report"});
  const limiter::client::HttpRateLimit http = limiter::client::RenderHttp(d);
  std::cout << http.status << " (" << limiter::client::SourceName(d.source) << ")\n";
  for (const auto& [name, value] : http.headers) std::cout << name << ": " << value << '\n';
  return 0;
}
