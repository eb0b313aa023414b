#include "bench/node_load.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "common/read_file.h"
#include "protocol/auth.h"
#include "protocol/frame_codec.h"
#include "protocol/wire.h"

namespace limiter::bench {
namespace {

// Replies may be larger than requests; accept up to 64 MiB (as NodeConnection does).
constexpr uint32_t kMaxReplyBytes = 64u << 20;
constexpr size_t kReadBytes = 64 * 1024;

std::string Describe(const wire::OpReply& op) {
  std::string text = wire::EnumNameStatus(op.status());
  if (op.error()) text += ": " + op.error()->str();
  return text;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

Result<std::unique_ptr<NodeChannel>> NodeChannel::Connect(const std::string& address,
                                                          std::string policy,
                                                          const NodeAccess& access,
                                                          int timeout_ms) {
  // The handshakes on a blocking connection; the load loop then takes the socket over, or
  // with TLS goes on through the connection.
  Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(address, timeout_ms, access);
  if (!c) return Error{c.error()};
  if ((*c)->tls()) {
    return std::unique_ptr<NodeChannel>(new NodeChannel(std::move(c).value(), std::move(policy)));
  }
  return std::unique_ptr<NodeChannel>(new NodeChannel((*c)->TakeDescriptor(), std::move(policy)));
}

NodeChannel::~NodeChannel() {
  if (fd_ >= 0) ::close(fd_);
}

void NodeChannel::EncodeFrame(std::span<const uint64_t> keys, std::vector<uint8_t>& out) {
  builder_.Clear();
  KeyBuffer buf;
  for (uint64_t key : keys) builder_.Check(next_id_++, policy_, KeyName(key, buf));
  AppendFrame(out, builder_.Finish());
}

Status NodeChannel::Send(std::span<const uint8_t> bytes) {
  if (tls_) return tls_->SendRaw(bytes);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Error{"timed out sending"};
      return Error{Errno("send")};
    }
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status NodeChannel::ReceiveFrame(size_t checks, CheckCounts& counts) {
  while (true) {
    Result<bool> took = TakeFrame(checks, counts);
    if (!took) return Error{took.error()};
    if (*took) return Status::Ok();
    if (Status s = Read(0); !s.ok()) return s;
  }
}

Result<size_t> NodeChannel::SendSome(std::span<const uint8_t> bytes) {
  if (tls_) return Error{"the open loop (--rate) does not run over TLS; use the closed loop"};
  while (true) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    if (errno != EINTR) return Error{Errno("send")};
  }
}

Status NodeChannel::Poll(Time until, bool for_replies, bool for_send) {
  if (tls_) return Error{"the open loop (--rate) does not run over TLS; use the closed loop"};
  Result<bool> readable = WaitForSocket(fd_, until, for_replies, for_send);
  if (!readable) return Error{readable.error()};
  return *readable ? Read(MSG_DONTWAIT) : Status::Ok();
}

Result<bool> NodeChannel::TakeFrame(size_t checks, CheckCounts& counts) {
  const FrameResult frame = DecodeFrame(in_.readable(), kMaxReplyBytes);
  if (frame.status == FrameStatus::kNeedMore) return false;
  if (frame.status != FrameStatus::kFrame) {
    return Error{"the node sent a bad frame: " + DescribeFrameError(frame, kMaxReplyBytes)};
  }
  Status counted = Count(frame.body, checks, counts);
  in_.Consume(frame.consumed);
  if (!counted.ok()) return counted;
  return true;
}

Status NodeChannel::Read(int flags) {
  const std::span<uint8_t> space = in_.Space(kReadBytes);
  if (tls_) {
    Result<size_t> n = tls_->ReadSome(space);
    if (!n) return Error{n.error()};
    if (*n == 0) return Error{"the node closed the connection"};
    in_.Commit(*n);
    return Status::Ok();
  }
  while (true) {
    const ssize_t n = ::recv(fd_, space.data(), space.size(), flags);
    if (n > 0) {
      in_.Commit(static_cast<size_t>(n));
      return Status::Ok();
    }
    if (n == 0) return Error{"the node closed the connection"};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (flags & MSG_DONTWAIT) return Status::Ok();
      return Error{"timed out waiting for a reply"};
    }
    return Error{Errno("recv")};
  }
}

Status NodeChannel::Count(std::span<const uint8_t> body, size_t checks, CheckCounts& counts) {
  const wire::Reply* received = VerifiedReply(body, aligned_);
  if (!received) return Error{"the node sent a reply that fails verification"};
  const wire::Reply& reply = *received;
  if (reply.error()) return Error{"the node refused a frame: " + reply.error()->str()};
  const auto* ops = reply.ops();
  const size_t n = ops ? ops->size() : 0;
  if (n != checks) {
    return Error{"a reply carried " + std::to_string(n) + " op replies for a frame of " +
                 std::to_string(checks) + " checks"};
  }
  for (const wire::OpReply* op : *ops) {
    if (op->id() != expected_id_) {
      return Error{"reply for op " + std::to_string(op->id()) + " where op " +
                   std::to_string(expected_id_) + " was due"};
    }
    ++expected_id_;
    ++counts.checks;
    if (op->status() != wire::Status::Ok) {
      ++counts.errors;
      if (counts.first_error.empty()) counts.first_error = Describe(*op);
    } else if (op->allowed()) {
      ++counts.allowed;
    } else {
      ++counts.denied;
    }
  }
  return Status::Ok();
}

Result<NodeStats> ReadNodeStats(NodeConnection& connection) {
  RequestBuilder builder;
  builder.Stats(0);
  if (Status s = connection.Send(builder.Finish()); !s.ok()) return s;
  Result<const wire::Reply*> received = connection.Receive();
  if (!received) return Error{received.error()};
  const wire::Reply& reply = **received;
  if (reply.error()) return Error{"the node refused STATS: " + reply.error()->str()};
  if (!reply.ops() || reply.ops()->size() != 1) return Error{"STATS: no op reply"};
  const wire::OpReply& op = *reply.ops()->Get(0);
  if (op.status() != wire::Status::Ok) return Error{"STATS: " + Describe(op)};
  NodeStats stats;
  bool have_keys = false, have_rss = false;
  if (op.stats()) {
    for (const wire::Stat* stat : *op.stats()) {
      if (!stat->name()) continue;
      const std::string_view name = stat->name()->string_view();
      have_keys |= name == "keys";
      have_rss |= name == "resident_bytes";
      ApplyNodeStat(stats, name, stat->value());
    }
  }
  if (!have_keys || !have_rss) return Error{"STATS: the reply lacks keys or resident_bytes"};
  return stats;
}

bool ApplyNodeStat(NodeStats& stats, std::string_view name, int64_t value) {
  if (name == "keys") {
    stats.keys = value;
  } else if (name == "resident_bytes") {
    stats.resident_bytes = value;
  } else if (name == "evictions") {
    stats.evictions = value;
  } else if (name == "frames") {
    stats.frames = value;
  } else if (name.starts_with("ops_check_") || name.starts_with("ops_lease_") ||
             name.starts_with("ops_return_")) {
    stats.store_ops += value;
  } else if (name.starts_with("durable_")) {
    const std::string_view field = name.substr(std::string_view("durable_").size());
    NodeDurableStats& d = stats.durable ? *stats.durable : stats.durable.emplace();
    if (field == "writes") {
      d.writes = value;
    } else if (field == "commits") {
      d.commits = value;
    } else if (field == "reads") {
      d.reads = value;
    } else if (field == "read_hits") {
      d.read_hits = value;
    } else if (field == "errors") {
      d.errors = value;
    } else if (field == "pending") {
      d.pending = value;
    } else if (field == "records_estimate") {
      d.keys = value;
    } else if (field == "disk_bytes") {
      d.disk_bytes = value;
    }
    // Any durable_ counter says the node has a database, even one NodeStats does not keep.
  } else {
    return false;
  }
  return true;
}

void GivePeerSecretToLocalNodes() {
  const auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (!set("LIMITER_SECRET_FILE") && !set("LIMITER_SECRET")) return;
  if (set("LIMITER_PEER_SECRET_FILE") || set("LIMITER_PEER_SECRET")) return;
  const auth::Nonce random = auth::RandomNonce();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : random) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  ::setenv("LIMITER_PEER_SECRET", hex.c_str(), 1);
}

namespace {

Result<LocalNode> StartNode(const LocalNodeOptions& options, const std::string& listen,
                            const std::vector<std::string>& cluster_args, int cpu = -1) {
  std::vector<std::string> argv;
  if (cpu >= 0) argv = {"taskset", "-c", std::to_string(cpu)};
  argv.insert(argv.end(), {options.program, "--listen", listen, "--admin", "127.0.0.1:0",
                           "--policies", options.policies});
  if (options.max_keys > 0) {
    argv.push_back("--max-keys");
    argv.push_back(std::to_string(options.max_keys));
  }
  if (options.threads > 0) {
    argv.push_back("--threads");
    argv.push_back(std::to_string(options.threads));
  }
  argv.insert(argv.end(), cluster_args.begin(), cluster_args.end());
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  Result<std::unique_ptr<Subprocess>> process = Subprocess::Start(argv);
  if (!process) return Error{"cannot start " + options.program + ": " + process.error()};
  LocalNode node;
  node.process = std::move(process).value();
  Result<std::string> line = node.process->ReadLine(options.start_timeout_ms);
  if (!line) return Error{options.program + " did not start: " + line.error()};
  node.banner = *line;
  // "limiterd NAME listening on HOST:PORT admin HOST:PORT threads N policies M"
  constexpr std::string_view kListening = " listening on ";
  const size_t at = node.banner.find(kListening);
  if (at == std::string::npos) {
    return Error{options.program + " printed an unexpected first line: " + node.banner};
  }
  const size_t begin = at + kListening.size();
  node.address = node.banner.substr(begin, node.banner.find(' ', begin) - begin);
  return node;
}

}  // namespace

namespace {

constexpr const char* kCpuCgroupRoot = "/sys/fs/cgroup/cpu";
constexpr int64_t kCfsPeriodUs = 5'000;  // short: a throttled node pauses briefly, often
constexpr int64_t kMinCfsQuotaUs = 1'000;
constexpr int64_t kMaxCfsPeriodUs = 1'000'000;

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  if (!f) return Error{"cannot write " + path + ": " + std::strerror(errno)};
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CpuBudget>> CpuBudget::Apply(int pid, double cores) {
  if (!(cores > 0)) return Error{"a CPU budget must be positive"};
  const std::string dir = std::string(kCpuCgroupRoot) + "/limiter-bench-" +
                          std::to_string(::getpid()) + "-" + std::to_string(pid);
  std::error_code ec;
  if (!std::filesystem::create_directory(dir, ec) || ec) {
    return Error{"cannot create the cgroup " + dir +
                 " (needs root and cgroup v1 'cpu'): " + (ec ? ec.message() : "it exists")};
  }
  std::unique_ptr<CpuBudget> budget(new CpuBudget(dir, pid));
  // The kernel takes no quota under 1 ms: small budgets get a longer period instead.
  const int64_t period = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(kMinCfsQuotaUs / cores)), kCfsPeriodUs, kMaxCfsPeriodUs);
  const int64_t quota =
      std::max<int64_t>(kMinCfsQuotaUs, std::llround(cores * static_cast<double>(period)));
  if (Status s = WriteText(dir + "/cpu.cfs_period_us", std::to_string(period)); !s.ok()) return s;
  if (Status s = WriteText(dir + "/cpu.cfs_quota_us", std::to_string(quota)); !s.ok()) return s;
  if (Status s = WriteText(dir + "/cgroup.procs", std::to_string(pid)); !s.ok()) return s;
  return budget;
}

CpuBudget::~CpuBudget() {
  // A group with a process in it cannot be removed: hand the process back to the root first.
  (void)WriteText(std::string(kCpuCgroupRoot) + "/cgroup.procs", std::to_string(pid_));
  std::error_code ignored;
  std::filesystem::remove(dir_, ignored);
}

Result<LocalNode> StartLocalNode(const LocalNodeOptions& options) {
  return StartNode(options, "127.0.0.1:0", {});
}

Result<int> StopLocalNode(LocalNode& node, int timeout_ms) {
  if (!node.process) return Error{"the node is not running"};
  node.process->Signal(SIGTERM);
  const std::optional<int> status = node.process->Wait(timeout_ms);
  if (!status) {
    return Error{"the node did not exit within " + std::to_string(timeout_ms) + " ms of SIGTERM"};
  }
  return *status;
}

Result<std::vector<LocalNode>> StartLocalCluster(int nodes, const LocalNodeOptions& options) {
  constexpr int kAttempts = 3;
  std::string last_error;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::vector<std::string> addresses;
    std::string members;
    for (int i = 0; i < nodes; ++i) {
      const int port = PickFreePort();
      if (port == 0) return Error{Errno("no free port on 127.0.0.1")};
      addresses.push_back("127.0.0.1:" + std::to_string(port));
      members += (i ? "," : "") + addresses.back();
    }
    std::vector<LocalNode> started;
    const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (size_t i = 0; i < addresses.size(); ++i) {
      const std::string& self = addresses[i];
      Result<LocalNode> node = StartNode(options, self, {"--members", members, "--self", self},
                                         options.pin ? static_cast<int>(i) % cpus : -1);
      if (!node) {
        last_error = node.error();
        break;
      }
      if (options.cpu_budget > 0) {
        Result<std::unique_ptr<CpuBudget>> budget =
            CpuBudget::Apply(node->process->pid(), options.cpu_budget);
        if (!budget) return Error{budget.error()};
        node->budget = std::move(budget).value();
      }
      started.push_back(std::move(node).value());
    }
    if (started.size() == addresses.size()) return started;
  }
  return Error{last_error};
}

std::string DefaultLimiterdPath() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return {};
  return (self.parent_path() / ".." / "server" / "limiterd").lexically_normal().string();
}

std::optional<double> CpuSeconds(int pid) {
  Result<std::string> stat =
      ReadWholeFile("/proc/" + std::to_string(pid) + "/stat", "process stat");
  if (!stat) return std::nullopt;
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat->substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    unsigned long long* to = i == 14 ? &utime : i == 15 ? &stime : nullptr;
    if (to == nullptr) continue;
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), *to);
    if (ec != std::errc() || end != field.data() + field.size()) return std::nullopt;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace limiter::bench
