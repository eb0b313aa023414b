// The node's database on a disk that fills up and frees again (server/durable_store.h), on a
// small tmpfs mounted for the test (the tests run as root in CI; without the right to mount,
// the test fails saying so, it never passes silently): once a write fails, the store says it
// is failing, the batch is given up within a bound (no wait for ever), and once space is back
// it resumes by itself, writes what was held back, and stops without hanging. Every wait is
// bounded; the mount goes in TearDown, whatever happened.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "common/clock.h"
#include "protocol/rules.h"
#include "server/durable_store.h"
#include "test/support/policies.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

// Runs `f` on its own thread and waits at most `seconds` for it: a call that hangs ends the
// test binary with a message (after a lazy unmount of `mount_point`) instead of hanging it.
template <typename F>
void Bounded(const std::string& what, int seconds, const std::string& mount_point, F f) {
  std::packaged_task<void()> task(std::move(f));
  std::future<void> done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: %s did not return within %d s: it hangs\n", what.c_str(), seconds);
    ::umount2(mount_point.c_str(), MNT_DETACH);
    std::_Exit(1);
  }
  t.join();
}

// Fills the file system of `path` with one file until a write fails with ENOSPC.
bool Fill(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  static char block[1 << 16] = {1};
  while (std::fwrite(block, 1, sizeof(block), f) == sizeof(block)) {
  }
  std::fclose(f);  // the last partial block may fail too: either way the disk is full
  return true;
}

const char* kPolicies = R"(
policies:
  - {name: quota, algorithm: fixed_window, limit: 1000, window: 1h, class: billing, durable: true}
)";

class DurableFullDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_ = ::testing::TempDir() + "/limiter_full_disk_" + std::to_string(::getpid());
    std::filesystem::create_directories(mount_);
    // Small, so that filling it takes a moment. Smaller than RocksDB's memtable (64 MB), so
    // its own recovery (which waits until that much is free) never would: the store's Resume
    // must bring it back.
    if (::mount("tmpfs", mount_.c_str(), "tmpfs", 0, "size=24m") != 0) {
      const int err = errno;
      std::filesystem::remove(mount_);
      FAIL() << "this test mounts a tmpfs on " << mount_ << " and cannot: " << std::strerror(err)
             << " (it needs root, or CAP_SYS_ADMIN; CI runs it as root)";
    }
    mounted_ = true;
    dir_ = mount_ + "/db";
    policies_ = testing::Policies(kPolicies, "full_disk.yaml");
  }
  void TearDown() override {
    if (store_) Bounded("closing the store", 60, mount_, [this] { store_.reset(); });
    if (mounted_ && ::umount(mount_.c_str()) != 0) ::umount2(mount_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(mount_, ec);
  }

  // Queues a charge of `count` on `key` and waits (bounded) until its batch is finished.
  uint64_t WriteAndWait(const std::string& key, int64_t count) {
    const Policy& p = policies_.policies()[0];
    KeyLimiter state(FixedWindow::State{clock_.NowMs() - clock_.NowMs() % 3'600'000, count});
    const DurableKeyName name{DurableKeyName::kLimit, key, ""};
    const uint64_t seq =
        store_->Write(0, protocol::LimitId(p, key, ""), name, state, clock_.NowMs());
    Bounded("waiting for a batch", 30, mount_, [&] { store_->WaitSynced(seq); });
    return seq;
  }

  std::string mount_, dir_;
  bool mounted_ = false;
  PolicySet policies_;
  ManualClock clock_{10'000'000};
  std::unique_ptr<DurableStore> store_;
};

TEST_F(DurableFullDisk, AFullDiskFailsBatchesWithinABoundAndTheStoreResumesWhenSpaceIsBack) {
  DurableOptions o;
  o.data_dir = dir_;
  Result<std::unique_ptr<DurableStore>> opened = DurableStore::Open(policies_, clock_, o);
  ASSERT_TRUE(opened.ok()) << opened.error();
  store_ = std::move(opened).value();
  const uint64_t first = WriteAndWait("before", 3);
  ASSERT_TRUE(store_->Synced(first));
  EXPECT_TRUE(store_->Writable().ok());

  const std::string filler = mount_ + "/filler";
  ASSERT_TRUE(Fill(filler));
  // Writes until one fails (the WAL's page in memory may take a few first): bounded.
  uint64_t failed = 0;
  for (int i = 0; i < 100'000 && failed == 0; ++i) {
    const uint64_t seq = WriteAndWait("k" + std::to_string(i), 1 + i % 900);
    if (store_->Failed(seq))
      failed = seq;
    else
      ASSERT_TRUE(store_->Synced(seq)) << "batch " << seq << " finished neither way";
  }
  ASSERT_NE(failed, 0u) << "no write failed on a full disk";
  const Status writable = store_->Writable();
  ASSERT_FALSE(writable.ok()) << "a failed batch leaves the store failing";
  const std::string& why = writable.error();
  EXPECT_NE(why.find("durable store '" + dir_ + "' cannot write ("), std::string::npos) << why;
  EXPECT_NE(why.find("space"), std::string::npos) << why;
  EXPECT_TRUE(store_->stats().failing);
  EXPECT_GE(store_->stats().failed_batches, 1);
  // While failing, a batch is given up at once (its replies never wait for the disk).
  const uint64_t during = WriteAndWait("during", 7);
  EXPECT_TRUE(store_->Failed(during));
  // A flush ends too (a stop on a full disk).
  Bounded("a flush on a full disk", 30, mount_, [&] { store_->Flush(); });

  // Space again: the store resumes by itself, without a restart (bounded wait, polled).
  std::filesystem::remove(filler);
  testing::WaitUntil([&] { return store_->Writable().ok(); }, std::chrono::seconds(30));
  const Status resumed = store_->Writable();
  ASSERT_TRUE(resumed.ok()) << "still failing 30 s after space came back: " << resumed.error();
  EXPECT_FALSE(store_->stats().failing);
  EXPECT_GE(store_->stats().resumes, 1);
  const uint64_t after = WriteAndWait("after", 5);
  EXPECT_TRUE(store_->Synced(after));
  EXPECT_FALSE(store_->Failed(after));
  // What was held back while the disk was full is written now too.
  const Policy& p = policies_.policies()[0];
  Result<std::optional<KeyLimiter>> held =
      store_->Read(0, protocol::LimitId(p, "during", ""), clock_.NowMs());
  ASSERT_TRUE(held.ok()) << held.error();
  ASSERT_TRUE(held->has_value()) << "the change made while the disk was full was lost";
  EXPECT_EQ(std::get<FixedWindow::State>((*held)->state()).count, 7);
  // And it stops without hanging (TearDown bounds the destructor too).
  Bounded("closing the store", 60, mount_, [this] { store_.reset(); });
}

}  // namespace
}  // namespace limiter
