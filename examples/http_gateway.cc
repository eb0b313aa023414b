// limiter-gateway: an HTTP gateway built on the client library, the README's example as a
// server. Every GET /api/... is decided by Client::Decide for the key in X-Api-Key (and the
// tenant in X-Tenant, for a policy that nests under one): 200 "ok" when admitted, else 429
// with Retry-After and the RateLimit-* fields of RenderHttp (and X-Limiter-Source: store,
// lease or fallback). /healthz answers 200; a request without X-Api-Key gets 400.
//
//   limiter-gateway --listen 0.0.0.0:8080 --policy-file policies.yaml
//     --members-dns limiterd:7450 --secret-file /run/secrets/limiter --gateways 2
//
// Threads: cpp-httplib's worker pool calls Decide concurrently (a Client is thread-safe);
// one thread waits for SIGTERM/SIGINT and stops the server.
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "limiter/client/client.h"
#include "limiter/client/http.h"

namespace {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    if (end > start) parts.push_back(text.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

void Decide(limiter::client::Client& client, const std::string& policy, const httplib::Request& req,
            httplib::Response& res) {
  const std::string key = req.get_header_value("X-Api-Key");
  if (key.empty()) {
    res.status = 400;
    res.set_content("Bad Request: no X-Api-Key header (the key to rate-limit)\n", "text/plain");
    return;
  }
  const std::string tenant = req.get_header_value("X-Tenant");
  const std::string operation = req.get_header_value("X-Operation");  // optional: its cost
  const limiter::client::Decision d =
      client.Decide({.policy = policy, .key = key, .tenant = tenant, .operation = operation});
  if (!d.error.empty()) {  // unknown policy or operation, a nested policy without X-Tenant
    res.status = 400;
    res.set_content("Bad Request: " + d.error + "\n", "text/plain");
    return;
  }
  const limiter::client::HttpRateLimit http = limiter::client::RenderHttp(d);
  res.status = http.status;
  for (const auto& [name, value] : http.headers) res.set_header(name, value);
  // Where the answer came from: store, lease, or fallback (the owner node slow or down).
  res.set_header("X-Limiter-Source", std::string(limiter::client::SourceName(d.source)));
  res.set_content(http.status == 200 ? std::string("ok\n") : http.body, "text/plain");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"limiter-gateway: an HTTP gateway that rate-limits GET /api/... by X-Api-Key"};
  std::string listen = "127.0.0.1:8080", members, policy = "api_key";
  limiter::client::Options options;
  options.name = "limiter-gateway";
  app.add_option("--listen", listen, "HOST:PORT to serve HTTP on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--policy-file", options.policy_file, "The policy file the nodes load")
      ->required();
  auto* members_opt = app.add_option("--members", members, "The nodes: HOST:PORT,HOST:PORT,...");
  app.add_option("--generation", options.members_generation, "The nodes' --generation");
  app.add_option("--members-dns", options.members_dns,
                 "Or NAME:PORT resolving to every node (re-resolved every 5 s)")
      ->excludes(members_opt);
  app.add_option("--secret-file", options.secret_file,
                 "The cluster secret (else $LIMITER_SECRET_FILE or $LIMITER_SECRET)");
  app.add_option("--gateways", options.gateways,
                 "Gateways in the fleet: contract limits fall back to L/N on each")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--policy", policy, "Policy each request is decided by")->capture_default_str();
  double deadline_ms = 2;
  app.add_option("--deadline-ms", deadline_ms,
                 "How long a decision may wait for its node before it falls back")
      ->check(CLI::Range(0.001, 60000.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  options.members = SplitCommas(members);
  options.deadline = std::chrono::microseconds(static_cast<int64_t>(deadline_ms * 1000));

  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    try {
      port = std::stoi(listen.substr(colon + 1));
    } catch (const std::exception&) {
    }
  }
  if (port < 0 || port > 65535) {
    std::cerr << "limiter-gateway: --listen '" << listen << "' is not HOST:PORT\n";
    return 2;
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);

  // Block the stop signals in every thread (the client's and the server's threads inherit
  // this mask); one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  limiter::Result<std::unique_ptr<limiter::client::Client>> created =
      limiter::client::Client::Create(options);
  if (!created.ok()) {
    std::cerr << "limiter-gateway: " << created.error() << '\n';
    return 1;
  }
  std::unique_ptr<limiter::client::Client> client = std::move(created).value();

  httplib::Server server;
  server.set_tcp_nodelay(true);  // else a kept-alive connection waits for delayed ACKs (40 ms)
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get(R"(/api(/.*)?)", [&](const httplib::Request& req, httplib::Response& res) {
    Decide(*client, policy, req, res);
  });
  if (port == 0) {
    port = server.bind_to_any_port(host);
  } else if (!server.bind_to_port(host, port)) {
    port = -1;
  }
  if (port < 0) {
    std::cerr << "limiter-gateway: cannot listen on " << listen << '\n';
    return 1;
  }
  std::printf("limiter-gateway listening on %s:%d policy %s\n", host.c_str(), port, policy.c_str());
  std::fflush(stdout);

  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    // A signal that came before the server ran would otherwise be lost.
    for (int i = 0; i < 100 && !server.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    server.stop();
  });
  server.listen_after_bind();
  // Stopped by a signal, or the server failed: a signal to the process (blocked everywhere)
  // wakes the waiter if it still waits.
  ::kill(::getpid(), SIGTERM);
  stopper.join();
  client->ReturnLeases();
  std::fprintf(stderr, "limiter-gateway: stopped\n");
  return 0;
}
