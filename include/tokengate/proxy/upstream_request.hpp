#pragma once

#include <boost/beast/http/message.hpp>

#include <string>
#include <string_view>

#include "tokengate/config/config.hpp"
#include "tokengate/core/recycled.hpp"
#include "tokengate/proxy/target.hpp"

namespace tokengate::proxy {

/// The request as it goes upstream: its head already written out (wire.hpp), and its body.
struct UpstreamRequest {
    core::RecycledString head;
    core::RecycledString body;
};

/// Who sent the request, as the upstream is told.
struct ClientOrigin {
    std::string_view peer;       // the socket's address
    std::string_view client_ip;  // the client as judged (X-Forwarded-For through trusted proxies)
    bool peer_is_trusted_proxy = false;
    std::string_view request_id;
    bool https = false;  // it came to the TLS listener: X-Forwarded-Proto says https
};

/// Writes the upstream request: the normalised target under the upstream's base path; the
/// client's fields less hop-by-hop ones, its key (Authorization, X-Api-Key; the upstream's own
/// key goes instead), Host, Expect, framing and the forwarding fields the gateway sets itself
/// (X-Forwarded-*, X-Real-IP, X-Request-Id, and Forwarded unless a trusted proxy sent it);
/// one Content-Length framing `body`.
/// `Fields`: the gateway's (proxy::Fields) or Beast's own (instantiated in upstream_request.cpp).
template <class Fields>
UpstreamRequest make_upstream_request(const boost::beast::http::request_header<Fields>& client,
                                      const NormalizedTarget& target, const config::UpstreamConfig& upstream,
                                      const ClientOrigin& from, core::RecycledString body);

}  // namespace tokengate::proxy
