#include <gtest/gtest.h>

#include <boost/beast/http/message.hpp>

#include "tokengate/proxy/target.hpp"
#include "tokengate/proxy/upstream_request.hpp"

namespace tokengate::proxy {
namespace {

namespace http = boost::beast::http;

std::string forwarded_proto(bool https, bool trusted, std::string_view claimed) {
    http::request_header<> client;
    client.method(http::verb::get);
    client.target("/v1/models");
    client.set(http::field::host, "gateway.example");
    if (!claimed.empty()) client.set("X-Forwarded-Proto", claimed);
    config::UpstreamConfig upstream;
    upstream.host = "10.0.0.9";
    upstream.port = 8000;
    ClientOrigin from{"10.1.1.1", "10.1.1.1", trusted, "rid", https};
    std::string head(make_upstream_request(client, normalize_target("/v1/models"), upstream, from, "").head);
    auto at = head.find("X-Forwarded-Proto: ");
    EXPECT_EQ(head.find("X-Forwarded-Proto: ", at + 1), std::string::npos) << head;  // one, never the client's too
    return at == std::string::npos ? "" : head.substr(at + 19, head.find("\r\n", at) - at - 19);
}

TEST(UpstreamRequest, ForwardedProtoIsTheSchemeTheClientUsed) {
    EXPECT_EQ(forwarded_proto(false, false, ""), "http");
    EXPECT_EQ(forwarded_proto(true, false, ""), "https");  // the TLS listener
    // A client's own claim is not believed, either way.
    EXPECT_EQ(forwarded_proto(false, false, "https"), "http");
    EXPECT_EQ(forwarded_proto(true, false, "http"), "https");
    // A trusted proxy in front (a TLS-terminating load balancer) knows better than we do.
    EXPECT_EQ(forwarded_proto(false, true, "https"), "https");
    EXPECT_EQ(forwarded_proto(true, true, ""), "https");
}

}  // namespace
}  // namespace tokengate::proxy
