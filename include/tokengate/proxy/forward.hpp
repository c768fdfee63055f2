#pragma once

#include <boost/beast/http.hpp>

#include <functional>
#include <memory>

#include "tokengate/core/clock.hpp"
#include "tokengate/proxy/pool.hpp"
#include "tokengate/proxy/relay.hpp"
#include "tokengate/proxy/upstream_request.hpp"
#include "tokengate/proxy/wire.hpp"

namespace tokengate::proxy {

namespace http = beast::http;

/// Shared between a forward and the coroutine that watches the client socket meanwhile.
struct ExchangeWatch {
    bool client_gone = false;
    bool finished = false;
    UpstreamConnection* active = nullptr;  // cancelled when the client goes away
    std::function<void()> on_client_gone;  // e.g. stop waiting in a shaping queue
};

enum class ForwardOutcome {
    completed,             // the whole response reached the client
    upstream_unavailable,  // nothing received: refused, reset, bad response → 502
    upstream_timeout,      // nothing received in time → 504
    upstream_broken,       // the upstream failed after the response started
    client_gone,           // the client went away; the upstream request was cancelled
    retry_elsewhere,       // ForwardHooks::retry_elsewhere turned the response away: nothing was relayed
};

/// The https handshakes a forward made (none when it reused a pooled connection).
struct UpstreamHandshakes {
    unsigned full = 0, resumed = 0, failed = 0;
    std::string failure;  // the last failure's reason
    void count(ConnectionPool::Handshake h) {
        if (h == ConnectionPool::Handshake::full) ++full;
        else if (h == ConnectionPool::Handshake::resumed) ++resumed;
        else if (h == ConnectionPool::Handshake::failed) ++failed;
    }
};

struct ForwardResult {
    ForwardOutcome outcome = ForwardOutcome::upstream_unavailable;
    unsigned status = 0;  // the upstream's status, once a response started
    bool response_started = false;
    bool stopped = false;  // the gateway ended the response (ForwardHooks::stop); the upstream was cut off
    std::uint64_t body_bytes = 0;
    core::Nanos first_byte_at = 0;  // clock time the upstream's response head arrived
    UpstreamHandshakes tls;
};

struct ClientSide {
    TimedStream& stream;
    bool keep_alive = true;
    unsigned version = 11;
    bool head_request = false;
};

/// Sends `request` upstream (retrying once on a stale pooled connection) and relays the
/// response to the client chunk by chunk, with backpressure: a chunk is read from the upstream
/// only after the previous one was written to the client.
net::awaitable<ForwardResult> forward(ConnectionPool& pool, UpstreamHealth& health, const UpstreamRequest& request,
                                      ClientSide client, ExchangeWatch& watch, const ForwardHooks& hooks,
                                      const core::Clock& clock);

}  // namespace tokengate::proxy
