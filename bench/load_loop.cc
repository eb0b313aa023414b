#include "bench/load_loop.h"

#include <poll.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "common/mutex.h"

namespace limiter::bench {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;
SteadyTime Now() { return std::chrono::steady_clock::now(); }

uint64_t Micros(std::chrono::steady_clock::duration d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return us > 0 ? static_cast<uint64_t>(us) : 0;
}

// Open loop: a connection that fell behind its schedule sends the frames due in writes of at
// most this many frames.
constexpr int kMaxFramesPerWrite = 64;
// Open loop: the longest a connection waits at a time, so that it sees a stop (another
// connection failed) while its schedule is sparse.
constexpr auto kMaxWait = std::chrono::milliseconds(100);
// The threads start together this long after RunLoad is called.
constexpr auto kStartDelay = std::chrono::milliseconds(20);

// What one connection's thread produces; merged once they have all finished.
struct ConnectionRun {
  CheckCounts counts;
  Histogram latency_us;
  SteadyTime last_reply{};
  Histogram send_lag_us;
};

// Shared by every thread of one RunLoad: the first error stops them all, and is what RunLoad
// reports (a connection that times out because another one failed is not the story).
class StopFlag {
 public:
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }
  void Stop(Status why) {
    MutexLock lock(mu_);
    if (why_.ok()) why_ = std::move(why);
    stopped_.store(true, std::memory_order_relaxed);
  }
  // The first error; ok when none stopped the run.
  Status why() {
    MutexLock lock(mu_);
    return why_;
  }

 private:
  std::atomic<bool> stopped_{false};
  Mutex mu_;
  Status why_ LIMITER_GUARDED_BY(mu_);
};

// Draws `batch` keys and encodes them as one frame.
class FrameSource {
 public:
  FrameSource(LoadChannel& channel, const LoadShape& shape, uint64_t seed)
      : channel_(channel), picker_(shape.keys, seed), keys_(static_cast<size_t>(shape.batch)) {}
  void AppendTo(std::vector<uint8_t>& out) {
    for (uint64_t& k : keys_) k = picker_.Next();
    channel_.EncodeFrame(keys_, out);
  }

 private:
  LoadChannel& channel_;
  KeyPicker picker_;
  std::vector<uint64_t> keys_;
};

void ClosedLoop(LoadChannel& channel, const LoadShape& shape, uint64_t seed, SteadyTime start,
                SteadyTime deadline, StopFlag& stop, ConnectionRun& run) {
  FrameSource frames(channel, shape, seed);
  const size_t depth = static_cast<size_t>(shape.depth);
  const size_t batch = static_cast<size_t>(shape.batch);
  std::vector<uint8_t> out;
  std::this_thread::sleep_until(start);

  // The first `depth` frames go in one write.
  for (size_t i = 0; i < depth; ++i) frames.AppendTo(out);
  std::vector<SteadyTime> sent_at(depth, Now());  // a ring: the frames in flight
  size_t head = 0;                                // the oldest
  size_t in_flight = depth;
  if (Status s = channel.Send(out); !s.ok()) return stop.Stop(std::move(s));
  while (in_flight > 0) {
    if (Status s = channel.ReceiveFrame(batch, run.counts); !s.ok()) return stop.Stop(std::move(s));
    const SteadyTime now = Now();
    run.latency_us.Record(Micros(now - sent_at[head]));
    run.last_reply = now;
    head = (head + 1) % depth;
    --in_flight;
    if (now >= deadline || stop.stopped()) continue;  // drain what is in flight
    out.clear();
    frames.AppendTo(out);
    sent_at[(head + in_flight) % depth] = Now();
    ++in_flight;
    if (Status s = channel.Send(out); !s.ok()) return stop.Stop(std::move(s));
  }
}

// When one connection's frames are meant to be sent: one every interval, the connections
// staggered evenly within it.
class Schedule {
 public:
  Schedule(const LoadShape& shape, int index, int connections, SteadyTime start,
           SteadyTime deadline)
      : start_(start),
        deadline_(deadline),
        interval_ns_(1e9 * shape.batch * connections / shape.rate),
        phase_(static_cast<double>(index) / connections) {}
  SteadyTime At(uint64_t frame) const {
    const double ns = (static_cast<double>(frame) + phase_) * interval_ns_;
    return start_ + std::chrono::nanoseconds(std::llround(ns));
  }
  // Frames are sent while their time is before the deadline.
  bool Sends(uint64_t frame) const { return At(frame) < deadline_; }

 private:
  SteadyTime start_;
  SteadyTime deadline_;
  double interval_ns_;
  double phase_;
};

// Sends each frame at its time, or at once when late, and takes the replies as they come,
// on one thread that never blocks but in Poll. A late frame is not skipped, and its latency
// counts from when it should have gone. While the connection takes no more bytes (the node's
// backlog showing, as it should) no frame is encoded; the frames due meanwhile go together
// once it does, and their send lag shows the wait.
void OpenLoop(LoadChannel& channel, const LoadShape& shape, uint64_t seed, const Schedule& schedule,
              StopFlag& stop, ConnectionRun& run) {
  // The kernel's default 50 us of timer slack would show up as latency.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  FrameSource frames(channel, shape, seed);
  const size_t batch = static_cast<size_t>(shape.batch);
  const auto reply_timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(shape.reply_timeout_s));
  std::vector<uint8_t> out;                   // encoded frames
  size_t written = 0;                         // bytes of `out` the connection has taken
  uint64_t encoded = 0;                       // frames [0, encoded) are in `out` or sent
  uint64_t answered = 0;                      // frames [0, answered) have had their replies
  SteadyTime last_progress = schedule.At(0);  // the last reply, or when none was awaited
  while (!stop.stopped()) {
    // Replies first: each one's latency is taken as soon as it is seen.
    while (answered < encoded) {
      Result<bool> took = channel.TakeFrame(batch, run.counts);
      if (!took) return stop.Stop(took.status());
      if (!*took) break;
      const SteadyTime now = Now();
      run.latency_us.Record(Micros(now - schedule.At(answered)));
      run.last_reply = now;
      last_progress = now;
      ++answered;
    }

    const SteadyTime now = Now();
    if (written == out.size()) {
      out.clear();
      written = 0;
      for (int due = 0;
           due < kMaxFramesPerWrite && schedule.Sends(encoded) && schedule.At(encoded) <= now;
           ++due, ++encoded) {
        frames.AppendTo(out);
        run.send_lag_us.Record(Micros(now - schedule.At(encoded)));
      }
    }
    if (written < out.size()) {
      Result<size_t> taken = channel.SendSome(std::span<const uint8_t>(out).subspan(written));
      if (!taken) return stop.Stop(taken.status());
      written += *taken;
    }

    const bool sending = written < out.size();
    const bool awaiting = answered < encoded;
    if (!sending && !awaiting && !schedule.Sends(encoded)) return;  // done
    SteadyTime until = now + kMaxWait;
    if (!sending && schedule.Sends(encoded)) until = std::min(until, schedule.At(encoded));
    if (awaiting) {
      if (now - last_progress >= reply_timeout) {
        return stop.Stop(Error{"timed out waiting for a reply"});
      }
      until = std::min(until, last_progress + reply_timeout);
    } else {
      last_progress = now;
    }
    if (Status s = channel.Poll(until, awaiting, sending); !s.ok()) return stop.Stop(std::move(s));
  }
}

}  // namespace

std::string_view KeyName(uint64_t key, KeyBuffer& buf) {
  buf[0] = 'k';
  const auto [end, ec] = std::to_chars(buf.data() + 1, buf.data() + buf.size(), key);
  return {buf.data(), static_cast<size_t>(end - buf.data())};
}

void CheckCounts::Merge(const CheckCounts& other) {
  checks += other.checks;
  allowed += other.allowed;
  denied += other.denied;
  errors += other.errors;
  if (first_error.empty()) first_error = other.first_error;
}

Result<bool> WaitForSocket(int fd, LoadChannel::Time until, bool for_replies, bool for_send) {
  const int64_t ns = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::nanoseconds>(until - Now()).count());
  const timespec timeout{static_cast<time_t>(ns / 1'000'000'000),
                         static_cast<long>(ns % 1'000'000'000)};
  pollfd p{fd, static_cast<short>((for_replies ? POLLIN : 0) | (for_send ? POLLOUT : 0)), 0};
  // With nothing to watch, a plain sleep: a closed socket would end it at once.
  if (::ppoll(&p, p.events != 0 ? 1 : 0, &timeout, nullptr) < 0 && errno != EINTR) {
    return Error{std::string("ppoll: ") + std::strerror(errno)};
  }
  return for_replies && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

Result<LoadResult> RunLoad(std::span<LoadChannel* const> channels, const LoadShape& shape) {
  const int connections = static_cast<int>(channels.size());
  const SteadyTime start = Now() + kStartDelay;
  const SteadyTime deadline =
      start + std::chrono::nanoseconds(std::llround(shape.duration_s * 1e9));
  StopFlag stop;
  std::vector<std::unique_ptr<ConnectionRun>> runs;
  std::vector<std::unique_ptr<Schedule>> schedules;
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    runs.push_back(std::make_unique<ConnectionRun>());
    LoadChannel& channel = *channels[static_cast<size_t>(c)];
    ConnectionRun& run = *runs.back();
    const uint64_t seed = shape.seed * 0x100000001b3ull + static_cast<uint64_t>(c);
    if (shape.rate > 0) {
      schedules.push_back(std::make_unique<Schedule>(shape, c, connections, start, deadline));
      const Schedule& schedule = *schedules.back();
      threads.emplace_back([&, seed] { OpenLoop(channel, shape, seed, schedule, stop, run); });
    } else {
      threads.emplace_back(
          [&, seed] { ClosedLoop(channel, shape, seed, start, deadline, stop, run); });
    }
  }
  for (std::thread& t : threads) t.join();
  if (Status why = stop.why(); !why.ok()) return why;

  LoadResult result;
  SteadyTime end = start;
  for (const auto& run : runs) {
    result.counts.Merge(run->counts);
    run->latency_us.AddTo(result.latency_us);
    run->send_lag_us.AddTo(result.send_lag_us);
    end = std::max(end, run->last_reply);
  }
  result.seconds = std::chrono::duration<double>(end - start).count();
  return result;
}

Result<CheckCounts> TouchEveryKey(LoadChannel& channel, uint64_t keys, int batch, int depth) {
  CheckCounts counts;
  std::vector<uint64_t> frame;
  std::vector<size_t> in_flight;  // checks per frame, oldest first (a short queue)
  std::vector<uint8_t> out;
  uint64_t next = 0;
  while (next < keys || !in_flight.empty()) {
    out.clear();
    while (next < keys && in_flight.size() < static_cast<size_t>(depth)) {
      frame.clear();
      for (; next < keys && frame.size() < static_cast<size_t>(batch); ++next) {
        frame.push_back(next);
      }
      channel.EncodeFrame(frame, out);
      in_flight.push_back(frame.size());
    }
    if (!out.empty()) {
      if (Status s = channel.Send(out); !s.ok()) return s;
    }
    if (Status s = channel.ReceiveFrame(in_flight.front(), counts); !s.ok()) return s;
    in_flight.erase(in_flight.begin());
  }
  return counts;
}

}  // namespace limiter::bench
