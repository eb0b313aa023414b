#include "client/asio_scheduler.h"

#include <time.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/mutex.h"

namespace limiter {

struct AsioScheduler::Impl {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  std::atomic<uint64_t> next_timer{1};
  std::unordered_map<uint64_t, std::unique_ptr<asio::steady_timer>> timers;  // io thread only
  std::thread thread;
  // Offloaded work: its own io_context and thread, made on first use.
  Mutex background_mu;
  std::unique_ptr<asio::io_context> background LIMITER_GUARDED_BY(background_mu);
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> background_guard;
  std::thread background_thread;
  bool stopped LIMITER_GUARDED_BY(background_mu) = false;
};

AsioScheduler::AsioScheduler() : impl_(std::make_unique<Impl>()) {
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

AsioScheduler::~AsioScheduler() { Stop(); }

void AsioScheduler::Stop() {
  impl_->guard.reset();
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  StopBackground();
}

void AsioScheduler::StopBackground() {
  {
    MutexLock lock(impl_->background_mu);
    impl_->stopped = true;
    if (impl_->background) impl_->background->stop();
  }
  if (impl_->background_thread.joinable()) impl_->background_thread.join();
}

void AsioScheduler::Offload(std::function<void()> fn) {
  MutexLock lock(impl_->background_mu);
  if (impl_->stopped) return;
  if (!impl_->background) {
    impl_->background = std::make_unique<asio::io_context>(1);
    impl_->background_guard =
        std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
            impl_->background->get_executor());
    impl_->background_thread = std::thread([io = impl_->background.get()] { io->run(); });
  }
  asio::post(*impl_->background, std::move(fn));
}

int64_t AsioScheduler::NowUs() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t AsioScheduler::NowCoarseUs() const {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1'000'000 + ts.tv_nsec / 1000;
}

void AsioScheduler::Post(std::function<void()> fn) { asio::post(impl_->io, std::move(fn)); }

uint64_t AsioScheduler::After(int64_t delay_us, std::function<void()> fn) {
  const uint64_t id = impl_->next_timer.fetch_add(1, std::memory_order_relaxed);
  auto arm = [this, id, delay_us, fn = std::move(fn)]() mutable {
    auto timer = std::make_unique<asio::steady_timer>(impl_->io);
    timer->expires_after(std::chrono::microseconds(delay_us));
    timer->async_wait([this, id, fn = std::move(fn)](const asio::error_code& ec) {
      if (ec) return;  // cancelled
      impl_->timers.erase(id);
      fn();
    });
    impl_->timers.emplace(id, std::move(timer));
  };
  // On the I/O thread (most calls: every store call's deadline), arm it now rather than
  // through one more handler in the queue.
  if (impl_->io.get_executor().running_in_this_thread()) {
    arm();
  } else {
    asio::post(impl_->io, std::move(arm));
  }
  return id;
}

void AsioScheduler::Cancel(uint64_t timer) {
  auto cancel = [this, timer] {
    auto it = impl_->timers.find(timer);
    if (it == impl_->timers.end()) return;
    it->second->cancel();
    impl_->timers.erase(it);
  };
  if (impl_->io.get_executor().running_in_this_thread()) {
    cancel();
  } else {
    asio::post(impl_->io, std::move(cancel));
  }
}

asio::io_context& AsioScheduler::io() { return impl_->io; }

void AsioScheduler::RunAndStop(std::function<void()> fn) {
  if (!impl_->thread.joinable()) return;  // stopped already
  asio::post(impl_->io, [this, fn = std::move(fn)] {
    fn();
    impl_->io.stop();  // run() returns after this handler; the queue is never run again
  });
  impl_->thread.join();
  impl_->guard.reset();
  StopBackground();
}

void AsioScheduler::RunAndWait(std::function<void()> fn) {
  std::promise<void> done;
  asio::post(impl_->io, [&] {
    fn();
    done.set_value();
  });
  done.get_future().wait();
}

}  // namespace limiter
