#include "tokengate/proxy/timed_stream.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>

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

struct TimedStream::TlsLayer {
    TlsLayer(TimedSocket& raw, net::ssl::context& context, std::shared_ptr<const void> owner)
        : owner(std::move(owner)), stream(raw, context) {}
    std::shared_ptr<const void> owner;  // keeps the context (and its session cache) alive
    net::ssl::stream<TimedSocket&> stream;
};

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);

/// Many servers end a connection without close_notify. Whether a body was whole is HTTP's
/// framing to tell (Content-Length, the last chunk), as for a plain connection, so the cut
/// reads as the end of the stream.
beast::error_code plain_eof(beast::error_code ec) {
    return ec == net::ssl::error::stream_truncated ? beast::error_code(net::error::eof) : ec;
}

}  // namespace

TimedStream::TimedStream(executor_type ex) : raw_(std::move(ex)) {}
TimedStream::TimedStream(net::ip::tcp::socket socket) : raw_(std::move(socket)) {}
TimedStream::~TimedStream() = default;

net::awaitable<beast::error_code> TimedStream::tls_accept(std::shared_ptr<net::ssl::context> context,
                                                          net::const_buffer received) {
    auto& ctx = *context;
    tls_ = std::make_unique<TlsLayer>(raw_, ctx, std::move(context));
    auto [ec, used] = co_await tls_->stream.async_handshake(net::ssl::stream_base::server, received, k_use);
    co_return ec;
}

net::awaitable<beast::error_code> TimedStream::tls_connect(std::shared_ptr<tls::ClientContext> context,
                                                           const std::string& host, bool& resumed) {
    auto& ctx = context->context();
    auto* client = context.get();
    tls_ = std::make_unique<TlsLayer>(raw_, ctx, std::move(context));
    client->prepare(tls_->stream.native_handle(), host);
    auto [ec] = co_await tls_->stream.async_handshake(net::ssl::stream_base::client, k_use);
    resumed = !ec && SSL_session_reused(tls_->stream.native_handle()) == 1;
    co_return ec;
}

net::awaitable<void> TimedStream::tls_close(std::chrono::nanoseconds timeout) {
    if (!tls_) co_return;
    raw_.expires_after(timeout);
    co_await tls_->stream.async_shutdown(k_use);  // ends when the peer answers or closes, or at the deadline
}

bool TimedStream::tls_resumed() const {
    return tls_ && SSL_session_reused(const_cast<net::ssl::stream<TimedSocket&>&>(tls_->stream).native_handle()) == 1;
}

const char* TimedStream::tls_version() const {
    return tls_ ? SSL_get_version(const_cast<net::ssl::stream<TimedSocket&>&>(tls_->stream).native_handle()) : "";
}

bool TimedStream::tls_unread() const {
    if (!tls_) return false;
    SSL* ssl = const_cast<net::ssl::stream<TimedSocket&>&>(tls_->stream).native_handle();
    return SSL_has_pending(ssl) == 1 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0;
}

std::string TimedStream::tls_failure(const beast::error_code& ec) const {
    return tls::failure_reason(ec, tls_ ? tls_->stream.native_handle() : nullptr);
}

void TimedStream::tls_read(net::mutable_buffer into, ReadHandler handler) {
    tls_->stream.async_read_some(into, [h = std::move(handler)](beast::error_code ec, std::size_t n) mutable {
        std::move(h)(plain_eof(ec), n);
    });
}

void TimedStream::tls_write(net::const_buffer from, ReadHandler handler) {
    tls_->stream.async_write_some(from, std::move(handler));
}

}  // namespace tokengate::proxy
