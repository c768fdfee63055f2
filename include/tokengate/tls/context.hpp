#pragma once

// TLS contexts (SPEC §16), built and checked from the config: the listener's certificate, and
// what a connection to an https upstream or a rediss:// store needs. Every problem a file can
// have is a ConfigError at the key that named it, so `check`, start-up and a reload all
// refuse it the same way.

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "tokengate/config/config.hpp"

namespace tokengate::tls {

namespace ssl = boost::asio::ssl;

/// The listener's context: the certificate chain and its key, checked to match and to be
/// valid now; the minimum version; ALPN limited to what `alpn` lists.
std::shared_ptr<ssl::context> make_server_context(const config::ServerTlsConfig& tls, const std::string& config_path);

/// When the context's certificate expires, in seconds since the epoch (0 without one): the
/// gauge an alert watches, as the blackbox exporter's probe_ssl_earliest_cert_expiry.
std::int64_t certificate_not_after(ssl::context& context);

/// Makes a server context ask every client for a certificate signed by a CA in `ca_file`
/// (mutual TLS). The mock upstream uses it to stand for an upstream that requires one.
void require_client_certificates(ssl::context& context, const std::string& ca_file);

/// Everything a connection to one TLS server needs: the context (trusted CAs, a client
/// certificate) and the last few sessions (tickets) the server gave, for resumption: a new
/// connection offers one no other connection has offered (TLS 1.3 tickets are meant for one
/// use, RFC 8446 C.4, and a server may refuse a second), else the newest. Shared by every
/// worker thread and every connection to that server.
class ClientContext {
public:
    ClientContext(const config::ClientTlsConfig& tls, const std::string& config_path);
    ~ClientContext();
    ClientContext(const ClientContext&) = delete;
    ClientContext& operator=(const ClientContext&) = delete;

    ssl::context& context() { return *context_; }
    /// Readies a new connection to `host`: SNI (for a name, not an address), the name or
    /// address the certificate must carry, and a session for resumption.
    void prepare(SSL* ssl, const std::string& host);

private:
    static int on_new_session(SSL* ssl, SSL_SESSION* session);

    std::unique_ptr<ssl::context> context_;
    bool verifies_ = true;
    /// A session the server gave, and whether a connection has offered it yet.
    struct Ticket {
        SSL_SESSION* session;  // owned
        bool offered;
    };
    static constexpr std::size_t k_tickets = 4;
    std::mutex mutex_;
    std::deque<Ticket> tickets_;  // oldest first
};

/// Builds every context the config names (listener, upstreams, store), throwing the first
/// ConfigError: what `check` runs.
void check_files(const config::GatewayConfig& config);

/// Why a handshake failed, for a log line: the certificate check's verdict when verification
/// was the cause ("certificate has expired"), else the error itself.
std::string failure_reason(const boost::system::error_code& ec, SSL* ssl);

/// The OpenSSL errors queued on this thread, as one line (and the queue emptied).
std::string openssl_errors();

}  // namespace tokengate::tls
