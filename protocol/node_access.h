// NodeAccess: what a process needs to reach the nodes besides their addresses: the cluster
// secret (proved in the hello) and, optionally, TLS. limiterctl, limiter-bench and the client
// library load it the same way: --secret-file or the environment (protocol/auth.h), and TLS
// files.
//
// Thread-safety: immutable once loaded; the TLS context is shared by every connection.
#pragma once

#include <memory>
#include <string>

#include "common/tls_options.h"
#include "limiter/status.h"

namespace asio::ssl {
class context;
}

namespace limiter {

struct NodeAccess {
  std::string secret;                       // the gateway secret; empty: none
  std::shared_ptr<asio::ssl::context> tls;  // null: plain TCP
  // A node (or an operator's tool) speaking as a peer: the member it speaks for, and the
  // peer secret it proves (empty: the node certificate of mutual TLS is its credential).
  std::string peer_name;
  std::string peer_secret;
  bool peer() const { return !peer_name.empty(); }
};

// A client's TLS context: verifies the node's certificate chain against options.ca_file
// (names are not checked: members are addresses, and the cluster's CA is the trust), and
// presents cert_file/key_file when given. Errors name the file.
Result<std::shared_ptr<asio::ssl::context>> MakeClientTlsContext(const TlsOptions& options);

// The secret from `secret_file` or the environment, and TLS when options.ca_file is given.
Result<NodeAccess> LoadNodeAccess(const std::string& secret_file, const TlsOptions& tls);

}  // namespace limiter
