#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <array>
#include <chrono>

namespace tokengate::server {

/// After an error answer to a client that may still be sending (a body over the limit), stop
/// sending and read what still comes, for a while, before closing: closing a socket with
/// unread bytes makes the kernel reset the connection, which can destroy the answer before
/// the client reads it. nginx's lingering_close, bounded the same way (time and bytes).
template <typename Stream>
boost::asio::awaitable<void> linger_then_close(Stream& stream) {
    constexpr std::size_t k_max_drained = 8 * 1024 * 1024;
    boost::system::error_code ignored;
    stream.socket().shutdown(boost::asio::socket_base::shutdown_send, ignored);
    stream.expires_after(std::chrono::seconds(2));
    std::array<char, 16384> sink;
    for (std::size_t drained = 0; drained < k_max_drained;) {
        auto [ec, n] = co_await stream.async_read_some(boost::asio::buffer(sink),
                                                       boost::asio::as_tuple(boost::asio::use_awaitable));
        if (ec) break;
        drained += n;
    }
    stream.socket().close(ignored);
}

}  // namespace tokengate::server
