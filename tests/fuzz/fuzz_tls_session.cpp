// Arbitrary client bytes into the TLS listener's path: the wait for the first byte, the check
// for plain HTTP, the server handshake through TimedStream's TLS layer (OpenSSL on the
// socket), then a request read through it, all on a real socket pair and a real event loop.
// It must end (the peer's bytes run out: EOF, never a hang), without a crash or a leak.
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tokengate/proxy/request_reader.hpp"
#include "tokengate/proxy/timed_stream.hpp"
#include "tokengate/tls/context.hpp"

namespace net = boost::asio;
using tokengate::proxy::TimedStream;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

/// A throwaway self-signed pair, made once per run: no key is kept in the repository.
std::shared_ptr<net::ssl::context> server_context() {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600L * 24 * 365);
    X509_set_pubkey(cert, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("fuzz"), -1, -1, 0);
    X509_set_issuer_name(cert, X509_get_subject_name(cert));
    require(X509_sign(cert, key, EVP_sha256()) > 0);
    std::string dir = "/tmp/tokengate-fuzz-tls-" + std::to_string(::getpid());
    std::system(("mkdir -p " + dir).c_str());
    tokengate::config::ServerTlsConfig tls;
    tls.cert.path = dir + "/cert.pem";
    tls.key.path = dir + "/key.pem";
    FILE* c = std::fopen(tls.cert.path.c_str(), "w");
    FILE* k = std::fopen(tls.key.path.c_str(), "w");
    require(c && k && PEM_write_X509(c, cert) && PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr));
    std::fclose(c);
    std::fclose(k);
    X509_free(cert);
    EVP_PKEY_free(key);
    return tokengate::tls::make_server_context(tls, "fuzz");
}

constexpr auto k_use = net::as_tuple(net::use_awaitable);

net::awaitable<void> serve(TimedStream& stream, std::shared_ptr<net::ssl::context> ctx, bool& finished) {
    boost::beast::flat_buffer buffer;
    stream.expires_after(std::chrono::seconds(5));
    auto [ec, ignored] = co_await stream.async_wait_readable(k_use);
    unsigned char first = 0;
    if (!ec && ::recv(stream.socket().native_handle(), &first, 1, MSG_PEEK) == 1 && first == 0x16) {
        auto hec = co_await stream.tls_accept(ctx);
        if (!hec) {
            tokengate::proxy::RequestReader reader(16 * 1024, 1 << 20);
            for (;;) {
                auto [rec, got] = co_await stream.async_read_some(buffer.prepare(8192), k_use);
                if (rec) break;
                buffer.commit(got);
                auto progress = reader.feed(buffer);
                if (progress == tokengate::proxy::RequestReader::Progress::failed || reader.done()) break;
            }
        } else {
            require(!stream.tls_failure(hec).empty());
        }
    }
    finished = true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const auto ctx = [] {
        std::signal(SIGPIPE, SIG_IGN);  // as the gateway: OpenSSL writes to a peer that may be gone
        return server_context();
    }();
    int fds[2];
    require(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    // The client's side: everything it will ever say, then the end of its stream. A socket
    // pair holds far more than a fuzz input, so this never blocks.
    std::size_t sent = 0;
    while (sent < size) {
        auto n = ::send(fds[1], data + sent, size - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<std::size_t>(n);
    }
    ::shutdown(fds[1], SHUT_WR);
    net::io_context ioc(1);
    bool finished = false;
    {
        net::ip::tcp::socket socket(ioc);
        socket.assign(net::ip::tcp::v4(), fds[0]);  // a stream descriptor is all Asio needs
        TimedStream stream(std::move(socket));
        net::co_spawn(ioc, serve(stream, ctx, finished), net::detached);
        // Not ioc.run(): the stream's deadline timer would keep it waiting to the deadline.
        while (!finished && ioc.run_one()) {}
        ioc.poll();  // the coroutine's own end
    }
    ioc.run();  // the stream is gone, its timer cancelled
    ::close(fds[1]);
    require(finished);
    return 0;
}
