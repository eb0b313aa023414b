// The drain on the way out, as the chart sets it up: handoff_deadline in the node config, a
// termination grace period that holds it (rendering fails when it cannot), and the preStop
// hook, whose script is run by bash against a stand-in for the node's admin port, with this
// build's limiterctl making the admin token from the peer secret.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/duration.h"
#include "protocol/auth.h"
#include "test/deploy/chart_support.h"
#include "test/support/build_paths.h"

namespace limiter::chart {
namespace {

// handoff_deadline as limiterd reads it: 0 (off) or a duration; -1 when it is neither.
int64_t DeadlineMs(const std::string& text) {
  if (text == "0") return 0;
  return ParseDurationMs(text).value_or(-1);
}

// The port number a probe of the container targets (by name or by number).
int ProbePort(const YAML::Node& container, const std::string& probe) {
  const std::string port = container[probe]["httpGet"]["port"].as<std::string>("");
  if (!port.empty() && port.find_first_not_of("0123456789") == std::string::npos) {
    return std::atoi(port.c_str());
  }
  return ContainerPort(container, port);
}

// The node container's preStop hook, `bash -c SCRIPT`: SCRIPT ("" and a failure otherwise).
std::string PreStopScript(const YAML::Node& container) {
  const YAML::Node command = container["lifecycle"]["preStop"]["exec"]["command"];
  if (!command.IsSequence() || command.size() != 3 || command[0].as<std::string>() != "bash" ||
      command[1].as<std::string>() != "-c") {
    ADD_FAILURE() << "no preStop hook `bash -c SCRIPT` on the node container: "
                  << YAML::Dump(container["lifecycle"]);
    return {};
  }
  return command[2].as<std::string>();
}

TEST_F(HelmChart, NodeConfigHasTheHandoffDeadline) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    EXPECT_EQ(View(m).config["handoff_deadline"].as<std::string>(""), "10s");
  }
  struct Case {
    std::string value;  // handoff.deadline
    std::string grace;  // terminationGracePeriodSeconds
    std::string rendered;
    int64_t ms;
  };
  for (const Case& c : std::vector<Case>{{"45s", "55", "45s", 45'000},
                                         {"2m", "130", "2m", 120'000},
                                         {"20", "30", "20s", 20'000},  // plain seconds
                                         {"0", "30", "0", 0}}) {       // off
    SCOPED_TRACE("handoff.deadline=" + c.value);
    Output run = TemplateWithSecret({"--set-string", "handoff.deadline=" + c.value, "--set",
                                     "terminationGracePeriodSeconds=" + c.grace});
    ASSERT_EQ(run.status, 0) << run.err;
    const NodeConfigView v = View(Manifests::Parse(run.out));
    EXPECT_EQ(v.config["handoff_deadline"].as<std::string>(""), c.rendered);
    Result<NodeConfig> config = LoadRendered(v, "handoff");
    ASSERT_TRUE(config) << config.error();
    EXPECT_EQ(config->node.handoff_deadline_ms, c.ms);
  }
}

TEST_F(HelmChart, GracePeriodHoldsTheDrain) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const int64_t deadline_ms = DeadlineMs(v.config["handoff_deadline"].as<std::string>(""));
    EXPECT_EQ(deadline_ms, 10'000);
    const int64_t grace_ms = v.pod_spec["terminationGracePeriodSeconds"].as<int64_t>(0) * 1000;
    EXPECT_GE(grace_ms, deadline_ms + 5'000) << "the least rendering allows";
    EXPECT_GE(grace_ms, deadline_ms + 10'000) << "the defaults leave the node time to exit";
  }
  // The least grace period the chart takes, and the same with a longer deadline.
  Output least = TemplateWithSecret({"--set", "terminationGracePeriodSeconds=15"});
  EXPECT_EQ(least.status, 0) << least.err;
  Output minutes = TemplateWithSecret(
      {"--set", "handoff.deadline=1m", "--set", "terminationGracePeriodSeconds=65"});
  EXPECT_EQ(minutes.status, 0) << minutes.err;
}

TEST_F(HelmChart, RenderingFailsWhenTheGracePeriodCannotHoldTheDrain) {
  Output short_grace = TemplateWithSecret({"--set", "terminationGracePeriodSeconds=14"});
  EXPECT_NE(short_grace.status, 0);
  EXPECT_NE(short_grace.err.find("terminationGracePeriodSeconds (14) must be at least "
                                 "handoff.deadline (10 s) + 5 s = 15"),
            std::string::npos)
      << short_grace.err;
  Output long_deadline = TemplateWithSecret({"--set", "handoff.deadline=1m"});
  EXPECT_NE(long_deadline.status, 0);
  EXPECT_NE(long_deadline.err.find("terminationGracePeriodSeconds (30) must be at least "
                                   "handoff.deadline (60 s) + 5 s = 65"),
            std::string::npos)
      << long_deadline.err;
  // Only N, Ns and Nm are understood, up to limiterd's own 10m.
  for (const char* form : {"500ms", "1h", "1m30s", "soon"}) {
    Output run = TemplateWithSecret({"--set-string", std::string("handoff.deadline=") + form});
    EXPECT_NE(run.status, 0) << form;
    EXPECT_NE(run.err.find("handoff.deadline must be whole seconds or minutes"), std::string::npos)
        << form << ": " << run.err;
  }
  Output too_long = TemplateWithSecret(
      {"--set", "handoff.deadline=11m", "--set", "terminationGracePeriodSeconds=700"});
  EXPECT_NE(too_long.status, 0);
  EXPECT_NE(too_long.err.find("handoff.deadline is at most 10m"), std::string::npos)
      << too_long.err;
  // The chart sets handoff_deadline: config.extra must not repeat it.
  Output extra = TemplateWithSecret({"--set", "config.extra.handoff_deadline=5s"});
  EXPECT_NE(extra.status, 0);
  EXPECT_NE(extra.err.find("config.extra.handoff_deadline is set by the chart"), std::string::npos)
      << extra.err;
}

TEST_F(HelmChart, PreStopHookDrainsThroughTheProbesAdminPort) {
  Output moved = TemplateWithSecret({"--set", "ports.admin=9123"});
  ASSERT_EQ(moved.status, 0) << moved.err;
  std::vector<std::pair<std::string, Manifests>> renderings = Both();
  renderings.emplace_back("ports.admin=9123", Manifests::Parse(moved.out));
  for (const auto& [what, m] : renderings) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const int admin = ProbePort(v.container, "readinessProbe");
    EXPECT_EQ(ProbePort(v.container, "livenessProbe"), admin);
    EXPECT_EQ(admin, what == "ports.admin=9123" ? 9123 : 7451);
    // The hook asks 127.0.0.1: the node's admin port must listen there.
    const std::string host = v.config["admin"].as<std::string>("");
    EXPECT_TRUE(host == "0.0.0.0:" + std::to_string(admin) ||
                host == "127.0.0.1:" + std::to_string(admin))
        << "admin: " << host;

    const std::string script = PreStopScript(v.container);
    EXPECT_NE(script.find("POST /drain"), std::string::npos) << script;
    // The admin port as a whole number in the hook (not a part of a longer one).
    const std::string port = std::to_string(admin);
    bool has_port = false;
    for (size_t p = script.find(port); p != std::string::npos && !has_port;
         p = script.find(port, p + 1)) {
      const bool digit_before = p > 0 && std::isdigit(static_cast<unsigned char>(script[p - 1]));
      const size_t after = p + port.size();
      const bool digit_after =
          after < script.size() && std::isdigit(static_cast<unsigned char>(script[after]));
      has_port = !digit_before && !digit_after;
    }
    EXPECT_TRUE(has_port) << "the admin port " << admin << " is not in the hook: " << script;
    size_t at = script.find("/dev/tcp/");
    EXPECT_NE(at, std::string::npos) << script;
    for (; at != std::string::npos; at = script.find("/dev/tcp/", at + 1)) {
      EXPECT_EQ(script.compare(at, 19, "/dev/tcp/127.0.0.1/"), 0) << script.substr(at, 40);
    }
    // Kubernetes' $(VAR) syntax stays out of the hook.
    EXPECT_EQ(script.find("$("), std::string::npos) << script;
    // The admin token comes from the peer secret the nodes mount.
    EXPECT_NE(script.find("limiterctl admin-token --peer-secret-file " +
                          v.config["peer_secret_file"].as<std::string>("?")),
              std::string::npos)
        << script;
  }
}

// A stand-in for limiterd's admin port on 127.0.0.1 (any free port): POST /drain answers
// `drain_status`; GET /healthz answers 200 `healthy` times (forever when not positive), and then
// the port closes, as when the node has handed its keys over and exited. Every request is
// recorded: its line, and its Authorization header ("" without one).
class FakeAdminPort {
 public:
  FakeAdminPort(int drain_status, int healthy) : drain_status_(drain_status), healthy_(healthy) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeAdminPort() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  std::vector<std::string> authorizations() {
    std::lock_guard<std::mutex> lock(mu_);
    return authorizations_;
  }

 private:
  void Serve() {
    int healthy_left = healthy_;
    while (!stop_) {
      pollfd p = {fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      timeval timeout = {2, 0};
      ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      std::string request;
      char buffer[1024];
      while (request.find("\r\n\r\n") == std::string::npos && request.size() < 8192) {
        const ssize_t n = ::recv(conn, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
      }
      const std::string line = request.substr(0, request.find("\r\n"));
      std::string authorization;
      const std::string header = "\r\nAuthorization: ";
      if (const size_t at = request.find(header); at != std::string::npos) {
        const size_t from = at + header.size();
        authorization = request.substr(from, request.find("\r\n", from) - from);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(line);
        authorizations_.push_back(authorization);
      }
      std::string reply;
      if (line.rfind("POST /drain ", 0) == 0) {
        reply = "HTTP/1.1 " + std::to_string(drain_status_) + " X\r\nContent-Length: 9\r\n\r\n" +
                "draining\n";
      } else if (line.rfind("GET /healthz ", 0) == 0) {
        reply = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
      } else {
        reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
      }
      // MSG_NOSIGNAL: the hook hangs up after the status line.
      ::send(conn, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(conn);
      if (line.rfind("GET /healthz ", 0) == 0 && healthy_left > 0 && --healthy_left == 0) {
        ::close(fd_);  // the node has exited: connections are refused from now on
        fd_ = -1;
        return;
      }
    }
  }

  const int drain_status_;
  const int healthy_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> requests_;
  std::vector<std::string> authorizations_;
};

struct HookRun {
  Output output;
  double seconds = 0;
};

// The peer secret the hook's limiterctl reads, and the admin token it must send.
constexpr char kHookPeerSecret[] = "hook-peer-0123456789abcdef01234567";

// The preStop hook rendered for an admin port of `port` (and `extra` values), run by bash with
// this build's limiterctl first on PATH and the peer secret's file, which the script names as
// mounted, moved to a file of the test's own holding `peer_secret` ("": no such file).
HookRun RunPreStopHook(int port, const std::vector<std::string>& extra = {},
                       const std::string& peer_secret = kHookPeerSecret) {
  std::vector<std::string> args = {"--set", "ports.admin=" + std::to_string(port)};
  args.insert(args.end(), extra.begin(), extra.end());
  Output rendered = TemplateWithSecret(args);
  EXPECT_EQ(rendered.status, 0) << rendered.err;
  if (rendered.status != 0) return {};
  const NodeConfigView v = View(Manifests::Parse(rendered.out));
  std::string script = PreStopScript(v.container);
  const std::string mounted = v.config["peer_secret_file"].as<std::string>("");
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("limiter_prestop_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path peer_file = dir / "peer-secret";
  fs::remove(peer_file);
  if (!peer_secret.empty()) std::ofstream(peer_file) << peer_secret << "\n";
  const size_t at = mounted.empty() ? std::string::npos : script.find(mounted);
  EXPECT_NE(at, std::string::npos) << "the hook does not read " << mounted << ": " << script;
  if (at != std::string::npos) script.replace(at, mounted.size(), peer_file.string());
  const char* path = std::getenv("PATH");
  const std::string search = Dir(testing::LimiterctlBin()) + ":" + (path ? path : "/usr/bin:/bin");
  const auto start = std::chrono::steady_clock::now();
  HookRun run;
  run.output = RunProgram({"/usr/bin/env", "PATH=" + search, "/bin/bash", "-c", script});
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fs::remove_all(dir);
  return run;
}

TEST_F(HelmChart, PreStopHookPostsDrainAndWaitsUntilTheNodeHasExited) {
  FakeAdminPort admin(202, 3);
  const HookRun run = RunPreStopHook(admin.port());
  EXPECT_EQ(run.output.status, 0) << run.output.out << run.output.err;
  EXPECT_EQ(admin.requests(),
            (std::vector<std::string>{"POST /drain HTTP/1.0", "GET /healthz HTTP/1.0",
                                      "GET /healthz HTTP/1.0", "GET /healthz HTTP/1.0"}));
  // The drain carries the peer secret's admin token; the probes of /healthz carry none.
  const std::string token = auth::AdminToken(kHookPeerSecret);
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(admin.authorizations(), (std::vector<std::string>{"Bearer " + token, "", "", ""}));
  // Three rounds of half a second, then the refused connection ends it.
  EXPECT_LT(run.seconds, 5.0);
}

TEST_F(HelmChart, PreStopHookWaitsAtMostTheDeadlinePlusFiveSeconds) {
  // A node that keeps answering: the hook gives up in time for the grace period.
  FakeAdminPort admin(202, -1);
  const HookRun run = RunPreStopHook(
      admin.port(), {"--set", "handoff.deadline=1s", "--set", "terminationGracePeriodSeconds=6"});
  EXPECT_EQ(run.output.status, 0) << run.output.out << run.output.err;
  EXPECT_LT(run.seconds, 1.0 + 5.0);
  EXPECT_GE(run.seconds, 1.0) << "it gave up before the deadline";
  EXPECT_GE(admin.requests().size(), 3u);
}

TEST_F(HelmChart, PreStopHookLeavesANodeWithoutDrainToTheSigterm) {
  // An image without /drain (404): the hook ends at once and SIGTERM does the stopping.
  FakeAdminPort admin(404, -1);
  const HookRun run = RunPreStopHook(admin.port());
  EXPECT_EQ(run.output.status, 0) << run.output.out << run.output.err;
  EXPECT_EQ(admin.requests(), (std::vector<std::string>{"POST /drain HTTP/1.0"}));
  EXPECT_LT(run.seconds, 2.0);
}

// A node that refuses the drain (401: no token; 403: a token of another peer secret) gets
// what any answer but 202 gets: the hook ends at once, and the SIGTERM that follows starts
// the same leave.
TEST_F(HelmChart, PreStopHookLeavesARefusedDrainToTheSigterm) {
  for (const int status : {401, 403}) {
    SCOPED_TRACE(status);
    FakeAdminPort admin(status, -1);
    const HookRun run = RunPreStopHook(admin.port());
    EXPECT_EQ(run.output.status, 0) << run.output.out << run.output.err;
    EXPECT_EQ(admin.requests(), (std::vector<std::string>{"POST /drain HTTP/1.0"}));
    EXPECT_EQ(admin.authorizations(),
              (std::vector<std::string>{"Bearer " + auth::AdminToken(kHookPeerSecret)}));
    EXPECT_LT(run.seconds, 2.0);
  }
}

// Without the peer secret's file limiterctl makes no token: the hook still asks, without an
// Authorization header (the node answers 401), and leaves the stop to the SIGTERM.
TEST_F(HelmChart, PreStopHookWithoutAPeerSecretAsksWithoutAToken) {
  FakeAdminPort admin(401, -1);
  const HookRun run = RunPreStopHook(admin.port(), {}, "");
  EXPECT_EQ(run.output.status, 0) << run.output.out << run.output.err;
  EXPECT_EQ(admin.requests(), (std::vector<std::string>{"POST /drain HTTP/1.0"}));
  EXPECT_EQ(admin.authorizations(), std::vector<std::string>{""});
  EXPECT_NE(run.output.err.find("limiterctl admin-token"), std::string::npos) << run.output.err;
}

}  // namespace
}  // namespace limiter::chart
