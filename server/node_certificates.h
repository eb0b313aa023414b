// NodeCertificates: tells a node's TLS client certificate from a gateway's, by the peer CA
// (tls.peer_ca, --tls-peer-ca), a CA that signs node certificates only. The data port's
// handshake accepts certificates of the client CA and of the peer CA alike; once it is done,
// a connection whose certificate chains to the peer CA is marked a node
// (Authenticator::NoteTlsNode), and only such a session may step up to the peer role.
//
// Thread-safety: immutable once loaded; Check from any thread (OpenSSL's store is only read).
#pragma once

#include <memory>
#include <string>

#include "limiter/status.h"

struct ssl_st;
struct x509_store_st;

namespace limiter {

class NodeCertificates {
 public:
  // The peer CA's file (PEM); an error naming it when it cannot be read.
  static Result<std::shared_ptr<const NodeCertificates>> Load(const std::string& ca_file);
  ~NodeCertificates();

  // Whether the peer of an established TLS connection presented a certificate that chains
  // to the peer CA (its own chain as the untrusted intermediates).
  bool IsNode(ssl_st* ssl) const;

 private:
  explicit NodeCertificates(x509_store_st* store) : store_(store) {}
  x509_store_st* store_;
};

}  // namespace limiter
