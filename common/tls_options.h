// TLS on the data port: which files, on either side. Plain data; the contexts are made where
// the sockets are (server/, client/), with OpenSSL through asio.
#pragma once

#include <string>

namespace limiter {

struct TlsOptions {
  // Node: its certificate chain and key (PEM); TLS is on when they are given. With ca_file,
  // every client must present a certificate that this CA signed (mutual TLS).
  // Client: ca_file verifies the node's certificate (TLS is on when it is given); cert_file
  // and key_file are its own certificate, for a node that requires one.
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  // Node: the CA that signs node certificates only (never a gateway's). With it, a session is
  // a peer only when its client certificate chains to this CA, and nodes verify each other's
  // certificates against it. Gateways' certificates chain to ca_file.
  std::string peer_ca_file;
};

}  // namespace limiter
