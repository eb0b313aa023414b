// limiterctl check, inspect and stats against one node.
#include <algorithm>
#include <atomic>
#include <iomanip>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>
#include <vector>

#include "client/ctl/commands.h"
#include "client/ctl/ops.h"
#include "common/mutex.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter::ctl {
namespace {

constexpr int kOpsPerFrame = 100;
constexpr int kFramesInFlight = 4;

std::string_view StatusName(wire::Status s) { return wire::EnumNameStatus(s); }

}  // namespace

int RunCheck(const CheckArgs& args, std::ostream& out, std::ostream& err) {
  if (args.count < 1 || args.concurrency < 1) {
    err << "limiterctl check: -n and --concurrency must be at least 1\n";
    return 2;
  }
  if (!args.cluster.empty()) return RunClusterCheck(args, out, err);
  if (args.server.empty()) {
    err << "limiterctl check: give --server HOST:PORT or --cluster HOST:PORT,...\n";
    return 2;
  }
  std::atomic<int64_t> allowed{0}, denied{0}, errors{0};
  Mutex first_error_mu;
  std::string first_error;  // guarded by first_error_mu (a local: no annotation applies)
  auto note_error = [&](const std::string& e, int64_t n) {
    errors += n;
    MutexLock lock(first_error_mu);
    if (first_error.empty()) first_error = e;
  };
  const int threads = static_cast<int>(std::min<int64_t>(args.concurrency, args.count));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    const int64_t mine = args.count / threads + (t < args.count % threads ? 1 : 0);
    workers.emplace_back([&, mine] {
      Result<std::unique_ptr<NodeConnection>> c =
          NodeConnection::Connect(args.server, 5000, args.access);
      if (!c) {
        note_error(c.error(), mine);
        return;
      }
      RequestBuilder b;
      std::vector<int> in_flight;  // ops per frame sent and not yet answered
      int64_t sent = 0;
      while (sent < mine || !in_flight.empty()) {
        while (sent < mine && static_cast<int>(in_flight.size()) < kFramesInFlight) {
          b.Clear();
          const int n = static_cast<int>(std::min<int64_t>(kOpsPerFrame, mine - sent));
          for (int i = 0; i < n; ++i) {
            b.Check(static_cast<uint64_t>(sent + i), args.policy, args.key, args.tenant, args.cost,
                    args.op, args.dry_run);
          }
          if (Status s = (*c)->Send(b.Finish()); !s.ok()) {
            note_error(s.error(), mine - sent);
            return;
          }
          sent += n;
          in_flight.push_back(n);
        }
        Result<const wire::Reply*> r = (*c)->Receive();
        if (!r) {
          int64_t lost = mine - sent;
          for (int n : in_flight) lost += n;
          note_error(r.error(), lost);
          return;
        }
        const int expected = in_flight.front();
        in_flight.erase(in_flight.begin());
        if ((*r)->error()) {
          note_error((*r)->error()->str(), expected);
          continue;
        }
        for (const wire::OpReply* op : *(*r)->ops()) {
          if (op->status() != wire::Status::Ok) {
            note_error(std::string(StatusName(op->status())) + ": " +
                           (op->error() ? op->error()->str() : ""),
                       1);
          } else if (op->allowed()) {
            ++allowed;
          } else {
            ++denied;
          }
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  if (args.json) {
    out << nlohmann::ordered_json{{"allowed", allowed.load()},
                                  {"denied", denied.load()},
                                  {"errors", errors.load()}}
               .dump()
        << '\n';
  } else {
    out << "allowed " << allowed << "  denied " << denied << "  errors " << errors << '\n';
  }
  if (!first_error.empty()) err << "limiterctl check: " << first_error << '\n';
  return errors > 0 ? 1 : 0;
}

int RunInspect(const InspectArgs& args, std::ostream& out, std::ostream& err) {
  Result<std::unique_ptr<NodeConnection>> c =
      NodeConnection::Connect(args.server, 5000, args.access);
  if (!c) {
    err << "limiterctl inspect: " << c.error() << '\n';
    return 1;
  }
  RequestBuilder b;
  b.Inspect(1, args.policy, args.key, args.tenant);
  Result<const wire::OpReply*> r = OneOp(**c, b);
  if (!r) {
    err << "limiterctl inspect: " << r.error() << '\n';
    return 1;
  }
  const wire::OpReply& op = **r;
  if (op.status() != wire::Status::Ok) {
    err << "limiterctl inspect: " << StatusName(op.status()) << ": "
        << (op.error() ? op.error()->str() : "") << '\n';
    return 1;
  }
  const wire::LimitResult* now =
      op.results() && op.results()->size() ? op.results()->Get(0) : nullptr;
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  if (op.state() && op.state()->fields()) {
    for (const wire::Stat* f : *op.state()->fields()) fields[f->name()->str()] = f->value();
  }
  const std::string algorithm =
      op.state() && op.state()->algorithm() ? op.state()->algorithm()->str() : "";
  const bool tracked = op.state() && op.state()->tracked();
  if (args.json) {
    out << nlohmann::ordered_json{{"server", args.server},
                                  {"policy", args.policy},
                                  {"key", args.key},
                                  {"algorithm", algorithm},
                                  {"tracked", tracked},
                                  {"remaining", now ? now->remaining() : 0},
                                  {"retry_after_ms", now ? now->retry_after_ms() : 0},
                                  {"reset_ms", now ? now->reset_ms() : 0},
                                  {"state", fields}}
               .dump()
        << '\n';
    return 0;
  }
  out << "key:        " << args.policy << " / " << args.key << " on " << args.server << '\n'
      << "algorithm:  " << algorithm << (tracked ? "" : " (no state: a fresh key)") << '\n';
  if (now) {
    out << "remaining:  " << now->remaining() << '\n'
        << "retry in:   " << now->retry_after_ms() << " ms\n"
        << "full in:    " << now->reset_ms() << " ms\n";
  }
  for (const auto& [name, value] : fields.items()) {
    out << "  " << std::left << std::setw(18) << name << value.get<int64_t>() << '\n';
  }
  return 0;
}

int RunStats(const StatsArgs& args, std::ostream& out, std::ostream& err) {
  Result<std::unique_ptr<NodeConnection>> c =
      NodeConnection::Connect(args.server, 5000, args.access);
  if (!c) {
    err << "limiterctl stats: " << c.error() << '\n';
    return 1;
  }
  RequestBuilder b;
  b.Stats(1);
  Result<const wire::OpReply*> r = OneOp(**c, b);
  if (!r || !(*r)->stats()) {
    err << "limiterctl stats: " << (r ? "the node sent no counters" : r.error()) << '\n';
    return 1;
  }
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  for (const wire::Stat* s : *(*r)->stats()) all[s->name()->str()] = s->value();
  if (args.json) {
    out << nlohmann::ordered_json{{"server", args.server}, {"stats", all}}.dump() << '\n';
    return 0;
  }
  out << "node " << args.server << '\n';
  for (const auto& [name, value] : all.items()) {
    out << "  " << std::left << std::setw(26) << name << value.get<int64_t>() << '\n';
  }
  return 0;
}

}  // namespace limiter::ctl
