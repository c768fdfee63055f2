#pragma once

#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

namespace tokengate::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;

/// A TCP stream whose operations fail with beast::error::timeout once its deadline passes,
/// closing the socket — beast::tcp_stream's contract, without its cost per operation. There,
/// every read and write starts and cancels a timer wait (two more handlers through the
/// scheduler); here the deadline is a number an operation never touches, and one timer per
/// stream wakes at the deadline and re-arms if it finds the deadline moved on meanwhile.
/// Operations must not overlap in one direction (as with any Asio stream).
class TimedStream {
public:
    using executor_type = net::any_io_executor;
    using clock = std::chrono::steady_clock;

    explicit TimedStream(executor_type ex) : TimedStream(net::ip::tcp::socket(std::move(ex))) {}
    explicit TimedStream(net::ip::tcp::socket socket);
    ~TimedStream();
    TimedStream(const TimedStream&) = delete;
    TimedStream& operator=(const TimedStream&) = delete;

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
};

}  // namespace tokengate::proxy

namespace boost::asio {

template <template <typename, typename> class Associator, typename Handler, typename DefaultCandidate>
struct associator<Associator, tokengate::proxy::TimedStream::Completion<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type get(
        const tokengate::proxy::TimedStream::Completion<Handler>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }
    static auto get(const tokengate::proxy::TimedStream::Completion<Handler>& h, const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};

}  // namespace boost::asio
