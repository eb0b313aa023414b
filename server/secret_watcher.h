// SecretWatcher: re-reads a secret's file (the gateway secret's or the peer secret's) every few
// seconds and hands a changed one to the node, so that the secret rotates without a restart (a
// Kubernetes Secret mounted as a file changes in place). A file that has become unreadable or
// invalid keeps the last good secret, with one message on stderr per change of error.
//
// Thread-safety: its own thread; the destructor stops it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "protocol/auth.h"

namespace limiter {

class Node;

class SecretWatcher {
 public:
  SecretWatcher(Node& node, std::string path, auth::SecretKind kind, auth::Secrets loaded,
                std::chrono::milliseconds interval);
  ~SecretWatcher();
  SecretWatcher(const SecretWatcher&) = delete;
  SecretWatcher& operator=(const SecretWatcher&) = delete;

 private:
  void Run();

  Node& node_;
  const std::string path_;
  const auth::SecretKind kind_;
  const std::chrono::milliseconds interval_;
  auth::Secrets current_;  // only on the watcher's thread
  std::string last_error_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ LIMITER_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace limiter
