#include "tokengate/proxy/upstream_request.hpp"

#include <boost/beast/core/string.hpp>

#include "tokengate/proxy/message.hpp"
#include "tokengate/proxy/wire.hpp"

namespace tokengate::proxy {

namespace {

namespace http = boost::beast::http;
using boost::beast::iequals;

/// Client fields the gateway replaces (or keeps to itself) on the way upstream.
bool replaced_in_upstream_request(http::field id, std::string_view name) {
    switch (id) {
        case http::field::host:
        case http::field::authorization:
        case http::field::expect:
        case http::field::content_length: return true;
        default: break;
    }
    if (name.empty() || (name[0] != 'x' && name[0] != 'X')) return false;
    return iequals(name, "x-forwarded-for") || iequals(name, "x-forwarded-proto") || iequals(name, "x-api-key") ||
           iequals(name, "x-request-id") || iequals(name, "x-real-ip");
}

/// From a peer that is not a trusted proxy, a Forwarded field is the client's own claim.
bool replaced_from_untrusted_peer(http::field id, std::string_view name) {
    return replaced_in_upstream_request(id, name) || iequals(name, "forwarded");
}

}  // namespace

template <class Fields>
UpstreamRequest make_upstream_request(const http::request_header<Fields>& client, const NormalizedTarget& target,
                                      const config::UpstreamConfig& upstream, const ClientOrigin& from,
                                      core::RecycledString body) {
    UpstreamRequest up;
    auto& head = up.head;
    head.reserve(1024);
    head.append(client.method_string()).append(" ").append(upstream.base_path);
    target.append_to(head);
    head.append(" HTTP/1.1\r\n");
    wire::forwardable_fields(head, client,
                             from.peer_is_trusted_proxy ? replaced_in_upstream_request : replaced_from_untrusted_peer);
    head.append("Host: ").append(upstream.host).push_back(':');
    head.append(std::to_string(upstream.port)).append(wire::k_crlf);
    if (!upstream.api_key.empty()) wire::field(head, "Authorization", "Bearer " + upstream.api_key);
    auto forwarded = first_field(client, "X-Forwarded-For");
    head.append("X-Forwarded-For: ");
    if (!forwarded.empty()) head.append(forwarded).append(", ");
    head.append(from.peer).append(wire::k_crlf);
    // The scheme the client used: ours, unless a trusted proxy in front (a TLS-terminating load
    // balancer) says what it was.
    std::string_view proto = first_field(client, "X-Forwarded-Proto");
    if (!from.peer_is_trusted_proxy || proto.empty()) proto = from.https ? "https" : "http";
    wire::field(head, "X-Forwarded-Proto", proto);
    wire::field(head, "X-Real-IP", from.client_ip);
    wire::field(head, "X-Request-Id", from.request_id);
    auto method = client.method();
    if (!body.empty() || method == http::verb::post || method == http::verb::put || method == http::verb::patch)
        wire::content_length(head, body.size());
    head.append(wire::k_crlf);
    up.body = std::move(body);
    return up;
}

template UpstreamRequest make_upstream_request(const http::request_header<Fields>&, const NormalizedTarget&,
                                               const config::UpstreamConfig&, const ClientOrigin&,
                                               core::RecycledString);
template UpstreamRequest make_upstream_request(const http::request_header<http::fields>&, const NormalizedTarget&,
                                               const config::UpstreamConfig&, const ClientOrigin&,
                                               core::RecycledString);

}  // namespace tokengate::proxy
