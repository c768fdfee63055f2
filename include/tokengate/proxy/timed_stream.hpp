#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace boost::asio::ssl {
class context;
}
namespace tokengate::tls {
class ClientContext;
}

namespace tokengate::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;

/// A TCP stream whose operations fail with beast::error::timeout once its deadline passes,
/// closing the socket — beast::tcp_stream's contract, without its cost per operation. There,
/// every read and write starts and cancels a timer wait (two more handlers through the
/// scheduler); here the deadline is a number an operation never touches, and one timer per
/// stream wakes at the deadline and re-arms if it finds the deadline moved on meanwhile.
/// Operations must not overlap in one direction (as with any Asio stream).
class TimedSocket {
public:
    using executor_type = net::any_io_executor;
    // Socket timeouts are real time, as the kernel's are: the timer's own clock, not core::Clock.
    using clock = net::steady_timer::clock_type;

    explicit TimedSocket(executor_type ex) : TimedSocket(net::ip::tcp::socket(std::move(ex))) {}
    explicit TimedSocket(net::ip::tcp::socket socket);
    ~TimedSocket();
    TimedSocket(const TimedSocket&) = delete;
    TimedSocket& operator=(const TimedSocket&) = delete;

    executor_type get_executor() noexcept { return socket_.get_executor(); }
    net::ip::tcp::socket& socket() noexcept { return socket_; }

    /// Operations pending when `timeout` has passed, or started after, fail with timeout.
    void expires_after(std::chrono::nanoseconds timeout);
    void expires_never();
    /// Ends pending operations with operation_aborted.
    void cancel() {
        beast::error_code ignored;
        socket_.cancel(ignored);
    }

    /// While set, waits for readability ignore the deadline (see TimedStream::async_watch_read).
    void untimed_reads(bool on) noexcept { untimed_reads_ = on; }
    /// Whether the deadline struck with no operation pending to report it.
    bool expired() const noexcept { return dog_->expired; }

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        return start<void(beast::error_code, std::size_t)>(
            std::forward<Token>(token), std::size_t{0},
            [this, buffers](auto&& completion) { socket_.async_read_some(buffers, std::move(completion)); });
    }

    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        return start<void(beast::error_code, std::size_t)>(
            std::forward<Token>(token), std::size_t{0},
            [this, buffers](auto&& completion) { socket_.async_write_some(buffers, std::move(completion)); });
    }

    /// Waits until the socket is readable (or writable), under the deadline like a read;
    /// completes with (error, 0). The TLS layer's way to wait: OpenSSL does the I/O itself.
    template <class Token>
    auto async_wait(net::socket_base::wait_type what, Token&& token) {
        auto wait = [this, what](auto&& completion) {
            socket_.async_wait(what, [c = std::move(completion)](const beast::error_code& ec) mutable {
                std::move(c)(ec, std::size_t{0});
            });
        };
        if (untimed_reads_ && what == net::socket_base::wait_read)
            return net::async_initiate<Token, void(beast::error_code, std::size_t)>(
                [wait](auto handler) mutable { wait(std::move(handler)); }, token);
        return start<void(beast::error_code, std::size_t)>(std::forward<Token>(token), std::size_t{0}, wait);
    }

    template <class Endpoints, class Token>
    auto async_connect(const Endpoints& endpoints, Token&& token) {
        return start<void(beast::error_code, net::ip::tcp::endpoint)>(
            std::forward<Token>(token), net::ip::tcp::endpoint{},
            [this, endpoints](auto&& completion) { net::async_connect(socket_, endpoints, std::move(completion)); });
    }

    /// Shared with the timer's handler, which may run after the stream is gone.
    struct Watchdog {
        explicit Watchdog(const executor_type& ex) : timer(ex) {}
        net::steady_timer timer;
        clock::time_point deadline = clock::time_point::max();
        clock::time_point armed_for = clock::time_point::max();  // max: no wait pending
        std::uint64_t generation = 0;                            // names the current wait
        net::ip::tcp::socket* socket = nullptr;                  // null once the stream is gone
        unsigned pending = 0;
        bool expired = false;
    };

    /// Wraps an operation's handler: counts it pending, turns its error into timeout if the
    /// deadline struck meanwhile. Associations (executor, allocator, cancellation) are the
    /// wrapped handler's.
    template <class Handler>
    struct Completion {
        std::shared_ptr<Watchdog> dog;
        Handler handler;
        template <class Result>
        void operator()(beast::error_code ec, Result result) {
            --dog->pending;
            if (dog->expired) ec = beast::error::timeout;
            std::move(handler)(ec, std::move(result));
        }
    };

private:
    template <class Signature, class Token, class Result, class Perform>
    auto start(Token&& token, Result empty, Perform perform) {
        return net::async_initiate<Token, Signature>(
            [this, empty](auto handler, Perform perform) {
                if (dog_->expired) {  // struck while no operation was pending
                    close_socket();
                    auto ex = net::get_associated_executor(handler, get_executor());
                    net::post(ex, [h = std::move(handler), empty]() mutable {
                        std::move(h)(beast::error::timeout, std::move(empty));
                    });
                    return;
                }
                ++dog_->pending;
                perform(Completion<decltype(handler)>{dog_, std::move(handler)});
            },
            token, std::move(perform));
    }
    void close_socket();
    static void arm(const std::shared_ptr<Watchdog>& dog);
    static void on_timer(const std::shared_ptr<Watchdog>& dog, std::uint64_t generation);

    net::ip::tcp::socket socket_;
    std::shared_ptr<Watchdog> dog_;
    bool untimed_reads_ = false;
};

/// A client's or an upstream's connection: a TimedSocket, and TLS over it once a handshake
/// made it so (SPEC §16). Plain connections take the socket's path with no extra cost. Over
/// TLS, OpenSSL reads and writes the socket itself (as in nginx) and an operation waits for
/// readiness when it must: no buffers of our own between the two, so an idle connection holds
/// little more than OpenSSL's session state (its record buffers are released when idle). It
/// is all in timed_stream.cpp, behind type-erased handlers.
class TimedStream {
public:
    using executor_type = net::any_io_executor;
    using IoHandler = net::any_completion_handler<void(beast::error_code, std::size_t)>;

    explicit TimedStream(executor_type ex);
    explicit TimedStream(net::ip::tcp::socket socket);
    ~TimedStream();
    TimedStream(const TimedStream&) = delete;
    TimedStream& operator=(const TimedStream&) = delete;

    executor_type get_executor() noexcept { return raw_.get_executor(); }
    net::ip::tcp::socket& socket() noexcept { return raw_.socket(); }
    void expires_after(std::chrono::nanoseconds timeout) { raw_.expires_after(timeout); }
    void expires_never() { raw_.expires_never(); }
    void cancel() { raw_.cancel(); }
    bool tls() const noexcept { return tls_ != nullptr; }

    /// The server's side of a handshake (nothing read from the socket yet: peek to decide).
    net::awaitable<beast::error_code> tls_accept(std::shared_ptr<net::ssl::context> context);
    /// The client's side, to `host`, offering the context's last session. `resumed` says
    /// whether the server took it.
    net::awaitable<beast::error_code> tls_connect(std::shared_ptr<tls::ClientContext> context, const std::string& host,
                                                  bool& resumed);
    /// Sends close_notify (bounded by `timeout`; the peer's is not waited for): a client
    /// reading to the end of the connection can tell our close from a cut.
    net::awaitable<void> tls_close(std::chrono::nanoseconds timeout);
    /// Whether the handshake resumed an earlier session.
    bool tls_resumed() const;
    /// "TLSv1.3" and the like; "" for a plain connection.
    const char* tls_version() const;
    /// For a pooled TLS connection about to be reused: true if it is clean, i.e. there is
    /// no application data waiting, and the peer has not closed or failed it. TLS messages
    /// that came after the last response (TLS 1.3 session tickets often do) are taken in
    /// passing, without blocking.
    bool tls_idle_and_clean();
    /// Why the handshake failed (the certificate check's verdict when that was it).
    std::string tls_failure(const beast::error_code& ec) const;

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        if (!tls_) return raw_.async_read_some(buffers, std::forward<Token>(token));
        return net::async_initiate<Token, void(beast::error_code, std::size_t)>(
            [this](auto handler, net::mutable_buffer into) { tls_read(into, std::move(handler)); }, token,
            first_buffer<net::mutable_buffer>(buffers));
    }

    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        if (!tls_) return raw_.async_write_some(buffers, std::forward<Token>(token));
        return net::async_initiate<Token, void(beast::error_code, std::size_t)>(
            [this](auto handler, net::const_buffer from) { tls_write(from, std::move(handler)); }, token,
            gather(buffers));
    }

    template <class Endpoints, class Token>
    auto async_connect(const Endpoints& endpoints, Token&& token) {
        return raw_.async_connect(endpoints, std::forward<Token>(token));
    }

    /// Sends what the socket takes at once, without waiting: a plain connection's request or
    /// reply that fits its send buffer, as most do, then needs no asynchronous operation (one
    /// trip through the event loop fewer). 0 over TLS, after the deadline, or when the buffer
    /// is full; `ec` is set only when the connection failed.
    std::size_t write_now(std::span<const net::const_buffer> buffers, beast::error_code& ec);

    /// Until the socket has something to read (under the deadline); completes with (error, 0).
    template <class Token>
    auto async_wait_readable(Token&& token) {
        return raw_.async_wait(net::socket_base::wait_read, std::forward<Token>(token));
    }

    /// A read that no deadline ends: the session's watch for a client that goes away while
    /// the upstream works, when the deadline belongs to the writes.
    template <class Handler>
    void async_watch_read(net::mutable_buffer into, Handler&& handler) {
        if (!tls_) return socket().async_read_some(into, std::forward<Handler>(handler));
        raw_.untimed_reads(true);
        tls_read(into, [this, h = std::forward<Handler>(handler)](beast::error_code ec, std::size_t n) mutable {
            raw_.untimed_reads(false);
            std::move(h)(ec, n);
        });
    }

    struct TlsLayer;
    struct TlsStep;

private:
    // TLS writes one buffer per operation (as SSL_write does); a write of several small
    // buffers (head and body) is gathered into one record instead of one record each.
    static constexpr std::size_t k_max_record = 16 * 1024;

    template <class Buffer, class Buffers>
    static Buffer first_buffer(const Buffers& buffers) {
        for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers); ++it)
            if (Buffer b(*it); b.size() > 0) return b;
        return Buffer();
    }

    template <class ConstBuffers>
    net::const_buffer gather(const ConstBuffers& buffers) {
        auto first = first_buffer<net::const_buffer>(buffers);
        if (first.size() >= k_max_record || net::buffer_size(buffers) == first.size()) return first;
        write_scratch_.clear();
        for (auto it = net::buffer_sequence_begin(buffers);
             it != net::buffer_sequence_end(buffers) && write_scratch_.size() < k_max_record; ++it) {
            net::const_buffer b(*it);
            write_scratch_.append(static_cast<const char*>(b.data()),
                                  std::min(b.size(), k_max_record - write_scratch_.size()));
        }
        return net::buffer(write_scratch_);
    }

    void tls_read(net::mutable_buffer into, IoHandler handler);
    void tls_write(net::const_buffer from, IoHandler handler);

    TimedSocket raw_;
    std::unique_ptr<TlsLayer> tls_;
    std::string write_scratch_;
};

}  // namespace tokengate::proxy

namespace boost::asio {

template <template <typename, typename> class Associator, typename Handler, typename DefaultCandidate>
struct associator<Associator, tokengate::proxy::TimedSocket::Completion<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type get(
        const tokengate::proxy::TimedSocket::Completion<Handler>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }
    static auto get(const tokengate::proxy::TimedSocket::Completion<Handler>& h, const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};

}  // namespace boost::asio
