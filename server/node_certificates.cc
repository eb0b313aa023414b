#include "server/node_certificates.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

namespace limiter {

Result<std::shared_ptr<const NodeCertificates>> NodeCertificates::Load(const std::string& ca_file) {
  X509_STORE* store = X509_STORE_new();
  if (store == nullptr) return Error{"TLS: out of memory for the peer CA's store"};
  if (X509_STORE_load_file(store, ca_file.c_str()) != 1) {
    const unsigned long e = ERR_get_error();
    ERR_clear_error();
    X509_STORE_free(store);
    char reason[256] = "unreadable";
    if (e != 0) ERR_error_string_n(e, reason, sizeof(reason));
    return Error{"TLS: " + ca_file + " (tls.peer_ca): " + reason};
  }
  return std::shared_ptr<const NodeCertificates>(new NodeCertificates(store));
}

NodeCertificates::~NodeCertificates() { X509_STORE_free(store_); }

bool NodeCertificates::IsNode(SSL* ssl) const {
  X509* leaf = SSL_get0_peer_certificate(ssl);
  if (leaf == nullptr) return false;
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  if (ctx == nullptr) return false;
  // The chain the peer sent, its leaf first; those past the leaf may be intermediates.
  bool node = X509_STORE_CTX_init(ctx, store_, leaf, SSL_get_peer_cert_chain(ssl)) == 1 &&
              X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  ERR_clear_error();
  return node;
}

}  // namespace limiter
