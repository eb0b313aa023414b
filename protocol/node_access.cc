#include "protocol/node_access.h"

#include <asio/ssl.hpp>

#include "protocol/auth.h"

namespace limiter {

Result<std::shared_ptr<asio::ssl::context>> MakeClientTlsContext(const TlsOptions& options) {
  if (options.ca_file.empty()) return Error{"TLS needs the CA file that signed the nodes"};
  if (options.cert_file.empty() != options.key_file.empty()) {
    return Error{"a client certificate needs both its file and its key file"};
  }
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  std::string file;
  try {
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1);
    file = options.ca_file;
    ctx->load_verify_file(options.ca_file);
    ctx->set_verify_mode(asio::ssl::verify_peer);
    if (!options.cert_file.empty()) {
      file = options.cert_file;
      ctx->use_certificate_chain_file(options.cert_file);
      file = options.key_file;
      ctx->use_private_key_file(options.key_file, asio::ssl::context::pem);
    }
  } catch (const std::system_error& e) {
    return Error{"TLS: " + file + ": " + e.code().message()};
  }
  // For connections that run OpenSSL on their socket (NodeConnection): read what has come,
  // not a record header and then its body.
  SSL_CTX_set_read_ahead(ctx->native_handle(), 1);
  return ctx;
}

Result<NodeAccess> LoadNodeAccess(const std::string& secret_file, const TlsOptions& tls) {
  NodeAccess access;
  Result<auth::SecretSource> secret = auth::FindSecrets(secret_file);
  if (!secret) return Error{secret.error()};
  if (!secret->secrets.empty()) access.secret = secret->secrets.values.front();
  if (!tls.ca_file.empty() || !tls.cert_file.empty()) {
    Result<std::shared_ptr<asio::ssl::context>> ctx = MakeClientTlsContext(tls);
    if (!ctx) return Error{ctx.error()};
    access.tls = std::move(ctx).value();
  }
  return access;
}

}  // namespace limiter
