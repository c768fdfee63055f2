#include "tokengate/tls/context.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <memory>

#include "tokengate/config/loader.hpp"

namespace tokengate::tls {

namespace {

[[noreturn]] void fail(const std::string& config_path, const config::ConfigFile& file, const std::string& message) {
    throw config::ConfigError(config_path, file.at.line, file.at.column, message);
}

std::string with_reason(std::string message) {
    auto reason = openssl_errors();
    if (!reason.empty()) message += " (" + reason + ")";
    return message;
}

std::string asn1_time_text(const ASN1_TIME* t) {
    struct tm tm {};
    if (!ASN1_TIME_to_tm(t, &tm)) return "?";
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return text;
}

/// A certificate used now must be valid now: an expired one would fail every handshake.
void check_validity(X509* cert, const std::string& config_path, const config::ConfigFile& file) {
    if (!cert) fail(config_path, file, file.path + " holds no certificate");
    if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0)
        fail(config_path, file,
             "the certificate in " + file.path + " expired on " + asn1_time_text(X509_get0_notAfter(cert)));
    if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0)
        fail(config_path, file,
             "the certificate in " + file.path + " is not valid before " + asn1_time_text(X509_get0_notBefore(cert)));
}

void load_pair(SSL_CTX* ctx, const config::ConfigFile& cert, const config::ConfigFile& key,
               const std::string& config_path) {
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(ctx, cert.path.c_str()) != 1)
        fail(config_path, cert, with_reason("cannot load the certificate " + cert.path));
    check_validity(SSL_CTX_get0_certificate(ctx), config_path, cert);
    // Read apart from the context, so that "not a key" and "not this certificate's key" are
    // told apart (OpenSSL checks the pair as it installs the key).
    std::unique_ptr<BIO, decltype(&BIO_free)> file(BIO_new_file(key.path.c_str(), "r"), BIO_free);
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey(
        file ? PEM_read_bio_PrivateKey(file.get(), nullptr, nullptr, nullptr) : nullptr, EVP_PKEY_free);
    if (!pkey) fail(config_path, key, with_reason("cannot load the private key " + key.path));
    if (X509_check_private_key(SSL_CTX_get0_certificate(ctx), pkey.get()) != 1) {
        ERR_clear_error();
        fail(config_path, key, "the key " + key.path + " does not match the certificate " + cert.path);
    }
    if (SSL_CTX_use_PrivateKey(ctx, pkey.get()) != 1)
        fail(config_path, key, with_reason("cannot use the private key " + key.path));
}

/// Offers the listener's protocols only; a client that offers none of them goes on without
/// ALPN (as nginx does) rather than being refused.
int select_alpn(SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in, unsigned in_len,
                void* arg) {
    const auto* wire = static_cast<const std::string*>(arg);
    unsigned char* selected = nullptr;
    if (SSL_select_next_proto(&selected, out_len, reinterpret_cast<const unsigned char*>(wire->data()),
                              static_cast<unsigned>(wire->size()), in, in_len) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
}

// A close without close_notify reads as the end of the stream: many servers and clients
// close that way, and HTTP's framing says whether a message was whole.
constexpr std::uint64_t k_options = SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF;

void common_modes(SSL_CTX* ctx) {
    // Idle connections give their record buffers back (most of a kept-alive client's life);
    // read-ahead takes a record header and body in one read rather than two.
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(ctx, 1);
}

int session_index() {
    static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return index;
}

int alpn_index() {
    static const int index = SSL_CTX_get_ex_new_index(
        0, nullptr, nullptr, nullptr,
        [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<std::string*>(ptr); });
    return index;
}

}  // namespace

std::string openssl_errors() {
    std::string out;
    while (unsigned long e = ERR_get_error()) {
        char text[256];
        ERR_error_string_n(e, text, sizeof text);
        if (!out.empty()) out += "; ";
        const char* reason = ERR_reason_error_string(e);
        out += reason ? reason : text;
    }
    return out;
}

std::shared_ptr<ssl::context> make_server_context(const config::ServerTlsConfig& tls, const std::string& config_path) {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
    SSL_CTX* native = ctx->native_handle();
    SSL_CTX_set_min_proto_version(native, tls.min_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION);
    // No renegotiation: a client could otherwise make a read want to write, and spend our CPU.
    SSL_CTX_set_options(native, k_options | SSL_OP_CIPHER_SERVER_PREFERENCE);
    common_modes(native);
    static constexpr unsigned char k_session_context[] = "tokengate";
    SSL_CTX_set_session_id_context(native, k_session_context, sizeof k_session_context - 1);
    load_pair(native, tls.cert, tls.key, config_path);
    if (!tls.alpn.empty()) {
        auto* wire = new std::string;
        for (const auto& p : tls.alpn) {
            wire->push_back(static_cast<char>(p.size()));
            wire->append(p);
        }
        SSL_CTX_set_ex_data(native, alpn_index(), wire);  // freed with the context
        SSL_CTX_set_alpn_select_cb(native, select_alpn, wire);
    }
    return ctx;
}

std::int64_t certificate_not_after(ssl::context& context) {
    X509* cert = SSL_CTX_get0_certificate(context.native_handle());
    struct tm tm {};
    if (!cert || !ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm)) return 0;
    return static_cast<std::int64_t>(timegm(&tm));
}

void require_client_certificates(ssl::context& context, const std::string& ca_file) {
    SSL_CTX* native = context.native_handle();
    ERR_clear_error();
    if (SSL_CTX_load_verify_locations(native, ca_file.c_str(), nullptr) != 1)
        throw std::runtime_error(with_reason("cannot load the client CA " + ca_file));
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
}

ClientContext::ClientContext(const config::ClientTlsConfig& tls, const std::string& config_path)
    : context_(std::make_unique<ssl::context>(ssl::context::tls_client)), verifies_(!tls.insecure_skip_verify) {
    SSL_CTX* native = context_->native_handle();
    SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
    SSL_CTX_set_options(native, k_options);
    common_modes(native);
    ERR_clear_error();
    if (!tls.ca_file.path.empty()) {
        if (SSL_CTX_load_verify_locations(native, tls.ca_file.path.c_str(), nullptr) != 1)
            fail(config_path, tls.ca_file, with_reason("cannot load the CA certificates in " + tls.ca_file.path));
    } else if (verifies_ && SSL_CTX_set_default_verify_paths(native) != 1) {
        throw std::runtime_error(with_reason("cannot load the system's CA store"));
    }
    SSL_CTX_set_verify(native, verifies_ ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
    if (!tls.client_cert.path.empty()) load_pair(native, tls.client_cert, tls.client_key, config_path);
    // Sessions are kept here, one per server, not in OpenSSL's cache keyed by nothing we use.
    SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_set_ex_data(native, session_index(), this);
    SSL_CTX_sess_set_new_cb(native, on_new_session);
}

ClientContext::~ClientContext() {
    for (auto& t : tickets_) SSL_SESSION_free(t.session);
}

void ClientContext::prepare(SSL* ssl, const std::string& host) {
    boost::system::error_code ec;
    boost::asio::ip::make_address(host, ec);              // an address, or a name (ec)
    if (ec) SSL_set_tlsext_host_name(ssl, host.c_str());  // SNI carries names only (RFC 6066)
    if (verifies_) {
        if (ec) SSL_set1_host(ssl, host.c_str());
        else X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
    }
    std::lock_guard lock(mutex_);
    if (tickets_.empty()) return;
    auto unused = std::find_if(tickets_.rbegin(), tickets_.rend(), [](const Ticket& t) { return !t.offered; });
    auto& ticket = unused != tickets_.rend() ? *unused : tickets_.back();
    ticket.offered = true;
    SSL_set_session(ssl, ticket.session);  // takes its own reference
}

int ClientContext::on_new_session(SSL* ssl, SSL_SESSION* session) {
    auto* self = static_cast<ClientContext*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), session_index()));
    if (!self) return 0;
    std::lock_guard lock(self->mutex_);
    self->tickets_.push_back({session, false});
    if (self->tickets_.size() > k_tickets) {
        SSL_SESSION_free(self->tickets_.front().session);
        self->tickets_.pop_front();
    }
    return 1;  // the reference is ours now
}

void check_files(const config::GatewayConfig& config) {
    if (config.server.tls) make_server_context(*config.server.tls, config.source_path);
    for (const auto& up : config.upstreams)
        if (up.https) ClientContext(up.tls, config.source_path);
    if (config.store.backend == config::StoreBackend::redis && config.store.redis.tls_enabled)
        ClientContext(config.store.redis.tls, config.source_path);
}

std::string failure_reason(const boost::system::error_code& ec, SSL* ssl) {
    if (ssl) {
        long verdict = SSL_get_verify_result(ssl);
        if (verdict != X509_V_OK)
            return std::string("certificate verification failed: ") + X509_verify_cert_error_string(verdict);
    }
    if (ec == boost::asio::ssl::error::stream_truncated) return "the peer closed the connection during the handshake";
    return ec.message();
}

}  // namespace tokengate::tls
