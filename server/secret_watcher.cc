#include "server/secret_watcher.h"

#include <cstdio>

#include "common/mutex.h"
#include "server/node.h"

namespace limiter {

SecretWatcher::SecretWatcher(Node& node, std::string path, auth::SecretKind kind,
                             auth::Secrets loaded, std::chrono::milliseconds interval)
    : node_(node),
      path_(std::move(path)),
      kind_(kind),
      interval_(interval),
      current_(std::move(loaded)) {
  thread_ = std::thread([this] { Run(); });
}

SecretWatcher::~SecretWatcher() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

void SecretWatcher::Run() {
  MutexLock lock(mu_);
  while (!cv_.WaitFor(lock, interval_, [this] {
    mu_.AssertHeld();
    return stopping_;
  })) {
    lock.Unlock();
    Result<auth::Secrets> read = auth::LoadSecretFile(path_);
    if (!read) {
      if (read.error() != last_error_) {
        std::fprintf(stderr, "limiterd: %s (keeping the last secret)\n", read.error().c_str());
        last_error_ = read.error();
      }
    } else {
      last_error_.clear();
      if (!(*read == current_)) {
        current_ = std::move(read).value();
        const Status set = kind_ == auth::SecretKind::kPeer
                               ? node_.authenticator().SetPeerSecrets(current_)
                               : node_.authenticator().SetSecrets(current_);
        if (!set.ok()) {
          std::fprintf(stderr, "limiterd: %s: %s (keeping the last secrets)\n", path_.c_str(),
                       set.error().c_str());
        } else {
          std::fprintf(stderr, "limiterd: %s reloaded from %s (%zu accepted)\n",
                       std::string(auth::SecretKindName(kind_)).c_str(), path_.c_str(),
                       current_.values.size());
        }
      }
    }
    lock.Lock();
  }
}

}  // namespace limiter
