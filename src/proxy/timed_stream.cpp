#include "tokengate/proxy/timed_stream.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>

#include "tokengate/tls/context.hpp"

namespace tokengate::proxy {

TimedSocket::TimedSocket(net::ip::tcp::socket socket)
    : socket_(std::move(socket)), dog_(std::make_shared<Watchdog>(socket_.get_executor())) {
    dog_->socket = &socket_;
}

TimedSocket::~TimedSocket() {
    dog_->socket = nullptr;
    dog_->timer.cancel();
}

std::size_t TimedStream::write_now(std::span<const net::const_buffer> buffers, beast::error_code& ec) {
    if (tls_ || raw_.expired() || !socket().is_open()) return 0;
    std::array<iovec, 8> pieces{};
    std::size_t count = 0;
    for (const auto& b : buffers)
        if (b.size() > 0 && count < pieces.size()) pieces[count++] = {const_cast<void*>(b.data()), b.size()};
    if (count == 0) return 0;
    msghdr message{};
    message.msg_iov = pieces.data();
    message.msg_iovlen = count;
    for (;;) {
        auto sent = ::sendmsg(socket().native_handle(), &message, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent >= 0) return static_cast<std::size_t>(sent);
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) ec.assign(errno, boost::system::system_category());
        return 0;
    }
}

void TimedSocket::expires_after(std::chrono::nanoseconds timeout) {
    dog_->expired = false;
    dog_->deadline = clock::now() + timeout;
    // A later deadline waits for the timer to find it; only an earlier one moves the timer.
    if (dog_->deadline < dog_->armed_for) arm(dog_);
}

void TimedSocket::expires_never() {
    dog_->expired = false;
    dog_->deadline = clock::time_point::max();
}

void TimedSocket::close_socket() {
    beast::error_code ignored;
    socket_.close(ignored);
}

void TimedSocket::arm(const std::shared_ptr<Watchdog>& dog) {
    dog->armed_for = dog->deadline;
    dog->timer.expires_at(dog->deadline);  // a wait already pending ends as aborted, and is ignored
    dog->timer.async_wait(
        [dog, generation = ++dog->generation](const beast::error_code&) { on_timer(dog, generation); });
}

void TimedSocket::on_timer(const std::shared_ptr<Watchdog>& dog, std::uint64_t generation) {
    if (generation != dog->generation || !dog->socket) return;  // replaced by a later wait, or the stream is gone
    dog->armed_for = clock::time_point::max();
    if (dog->deadline == clock::time_point::max()) return;
    if (clock::now() < dog->deadline) return arm(dog);
    dog->expired = true;
    if (dog->pending > 0) {  // pending operations end now, as timeout (Completion)
        beast::error_code ignored;
        dog->socket->close(ignored);
    }
}

// ---- TLS over the timed socket ----

/// OpenSSL on the socket's descriptor (non-blocking): SSL_read and friends read and write it
/// directly, and say when they must wait for it.
struct TimedStream::TlsLayer {
    TlsLayer(SSL* ssl, std::shared_ptr<const void> owner) : ssl(ssl), owner(std::move(owner)) {}
    ~TlsLayer() { SSL_free(ssl); }
    TlsLayer(const TlsLayer&) = delete;
    TlsLayer& operator=(const TlsLayer&) = delete;
    SSL* ssl;
    std::shared_ptr<const void> owner;  // keeps the SSL_CTX's owner (and its session cache) alive
};

namespace {

constexpr auto k_await = net::as_tuple(net::use_awaitable);

beast::error_code last_ssl_error() {
    auto e = ERR_get_error();
    ERR_clear_error();
    return beast::error_code(static_cast<int>(e ? e : ERR_PACK(ERR_LIB_SSL, 0, ERR_R_INTERNAL_ERROR)),
                             net::error::get_ssl_category());
}

}  // namespace

/// One TLS operation, tried and, each time OpenSSL wants the socket readable or writable,
/// waited for and tried again; the same object is the wait's handler. Read and write may be
/// under way at once (SSL allows interleaved calls on one thread).
struct TimedStream::TlsStep {
    enum class Kind { read, write, accept, connect, shutdown };
    TimedStream* stream;
    Kind kind;
    void* data;
    std::size_t size;
    IoHandler handler;

    /// A handshake or a close, awaited: one step, then every retry, to the end.
    static net::awaitable<beast::error_code> run(TimedStream* stream, Kind kind) {
        auto [ec, ignored] = co_await net::async_initiate<decltype(k_await), void(beast::error_code, std::size_t)>(
            [stream, kind](auto handler) {
                TlsStep{stream, kind, nullptr, 0, std::move(handler)}();
            },
            k_await);
        co_return ec;
    }

    void operator()(beast::error_code ec = {}, std::size_t = 0) {
        if (ec) return std::move(handler)(ec, 0);
        SSL* ssl = stream->tls_->ssl;
        ERR_clear_error();
        std::size_t done = 0;
        int r = 0;
        switch (kind) {
            case Kind::read: r = SSL_read_ex(ssl, data, size, &done); break;
            case Kind::write: r = SSL_write_ex(ssl, data, size, &done); break;
            case Kind::accept: r = SSL_accept(ssl); break;
            case Kind::connect: r = SSL_connect(ssl); break;
            case Kind::shutdown: r = SSL_shutdown(ssl) >= 0 ? 1 : -1; break;  // 0: ours sent, enough
        }
        if (r == 1) {
            // A big gathered write leaves its copy behind; an idle connection should not keep it.
            if (kind == Kind::write && stream->write_scratch_.capacity() > 4096)
                std::string().swap(stream->write_scratch_);
            return std::move(handler)(beast::error_code{}, done);
        }
        switch (SSL_get_error(ssl, r)) {
            case SSL_ERROR_WANT_READ: return stream->raw_.async_wait(net::socket_base::wait_read, std::move(*this));
            case SSL_ERROR_WANT_WRITE: return stream->raw_.async_wait(net::socket_base::wait_write, std::move(*this));
            // The peer's close_notify, or (SSL_OP_IGNORE_UNEXPECTED_EOF) a close without one:
            // whether a body was whole is HTTP's framing to tell, as on a plain connection.
            case SSL_ERROR_ZERO_RETURN: return std::move(handler)(net::error::eof, 0);
            case SSL_ERROR_SYSCALL: {
                ERR_clear_error();
                auto sys = errno ? beast::error_code(errno, beast::system_category()) : net::error::eof;
                return std::move(handler)(sys, 0);
            }
            default: return std::move(handler)(last_ssl_error(), 0);
        }
    }
};

TimedStream::TimedStream(executor_type ex) : raw_(std::move(ex)) {}
TimedStream::TimedStream(net::ip::tcp::socket socket) : raw_(std::move(socket)) {}
TimedStream::~TimedStream() = default;

namespace {

/// Errors before the handshake starts (no descriptor, no memory) read as a failed handshake.
beast::error_code attach(net::ip::tcp::socket& socket, SSL* ssl) {
    beast::error_code ec;
    socket.non_blocking(true, ec);  // OpenSSL's reads and writes must never block the loop
    if (!ec && SSL_set_fd(ssl, socket.native_handle()) != 1) ec = last_ssl_error();
    return ec;
}

}  // namespace

net::awaitable<beast::error_code> TimedStream::tls_accept(std::shared_ptr<net::ssl::context> context) {
    SSL* ssl = SSL_new(context->native_handle());
    if (!ssl) co_return last_ssl_error();
    tls_ = std::make_unique<TlsLayer>(ssl, std::move(context));
    if (auto ec = attach(socket(), ssl)) co_return ec;
    co_return co_await TlsStep::run(this, TlsStep::Kind::accept);
}

net::awaitable<beast::error_code> TimedStream::tls_connect(std::shared_ptr<tls::ClientContext> context,
                                                           const std::string& host, bool& resumed) {
    SSL* ssl = SSL_new(context->context().native_handle());
    if (!ssl) co_return last_ssl_error();
    context->prepare(ssl, host);
    tls_ = std::make_unique<TlsLayer>(ssl, std::move(context));
    if (auto ec = attach(socket(), ssl)) co_return ec;
    auto ec = co_await TlsStep::run(this, TlsStep::Kind::connect);
    resumed = !ec && SSL_session_reused(ssl) == 1;
    co_return ec;
}

net::awaitable<void> TimedStream::tls_close(std::chrono::nanoseconds timeout) {
    if (!tls_) co_return;
    raw_.expires_after(timeout);
    co_await TlsStep::run(this, TlsStep::Kind::shutdown);
}

bool TimedStream::tls_resumed() const { return tls_ && SSL_session_reused(tls_->ssl) == 1; }

const char* TimedStream::tls_version() const { return tls_ ? SSL_get_version(tls_->ssl) : ""; }

bool TimedStream::tls_idle_and_clean() {
    if (!tls_) return false;
    ERR_clear_error();
    char byte;
    std::size_t n = 0;
    int r = SSL_peek_ex(tls_->ssl, &byte, 1, &n);  // non-blocking: reads only what has arrived
    bool clean = r != 1 && SSL_get_error(tls_->ssl, r) == SSL_ERROR_WANT_READ;
    ERR_clear_error();
    return clean;
}

std::string TimedStream::tls_failure(const beast::error_code& ec) const {
    return tls::failure_reason(ec, tls_ ? tls_->ssl : nullptr);
}

void TimedStream::tls_read(net::mutable_buffer into, IoHandler handler) {
    TlsStep{this, TlsStep::Kind::read, into.data(), into.size(), std::move(handler)}();
}

void TimedStream::tls_write(net::const_buffer from, IoHandler handler) {
    TlsStep{this, TlsStep::Kind::write, const_cast<void*>(from.data()), from.size(), std::move(handler)}();
}

}  // namespace tokengate::proxy
