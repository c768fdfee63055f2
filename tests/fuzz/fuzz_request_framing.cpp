// Arbitrary client bytes, split at arbitrary points, through the session's RequestReader and
// the upstream request it builds: every request the reader accepts goes upstream as exactly
// one well-framed message (re-parsed strictly: one message, every byte, the same method,
// normalised target and body, no Transfer-Encoding, one Host, none of the client's keys); and
// after a refused request nothing more is read, as the session closes the connection.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokengate/proxy/request_reader.hpp"
#include "tokengate/proxy/target.hpp"
#include "tokengate/proxy/upstream_request.hpp"

namespace http = boost::beast::http;
using tokengate::proxy::RequestReader;
using Progress = RequestReader::Progress;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

const tokengate::config::UpstreamConfig& upstream() {
    static const auto u = [] {
        tokengate::config::UpstreamConfig c;
        c.host = "10.9.9.9";
        c.port = 8000;
        c.base_path = "/base";
        c.api_key = "UPSTREAM-KEY";
        return c;
    }();
    return u;
}

/// What the upstream would receive must parse as exactly one message, whole.
void check_upstream(const tokengate::proxy::ClientRequest& client, const tokengate::proxy::NormalizedTarget& target,
                    const tokengate::proxy::UpstreamRequest& up) {
    std::string wire(up.head);
    wire.append(up.body);
    http::request_parser<http::string_body> parser;
    parser.eager(true);
    parser.body_limit(boost::none);
    boost::beast::error_code ec;
    auto used = parser.put(boost::asio::buffer(wire), ec);
    require(!ec && parser.is_done() && used == wire.size());
    const auto& got = parser.get();
    require(got.method_string() == client.method_string());
    std::string expected_target = "/base";
    expected_target.append(target.path);
    if (!target.query.empty()) expected_target += "?" + std::string(target.query);
    require(got.target() == expected_target);
    require(std::string_view(got.body()) == std::string_view(client.body()));
    require(got.count(http::field::transfer_encoding) == 0);
    require(got.count(http::field::host) == 1 && got[http::field::host] == "10.9.9.9:8000");
    require(got.count(http::field::authorization) == 1 && got[http::field::authorization] == "Bearer UPSTREAM-KEY");
    require(got.count("x-api-key") == 0);
    require(got.count(http::field::content_length) <= 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::size_t piece = 1 + data[0] % 128;
    std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
    std::size_t fed = 0;
    boost::beast::flat_buffer buffer;
    auto read = [&] {  // the session's read: the next piece of what the client sent
        if (fed >= input.size()) return false;
        auto n = std::min(piece, input.size() - fed);
        auto space = buffer.prepare(n);
        std::memcpy(space.data(), input.data() + fed, n);
        buffer.commit(n);
        fed += n;
        return true;
    };
    for (int request = 0; request < 32; ++request) {
        if (buffer.size() == 0 && !read()) return 0;
        RequestReader reader(4096, 64 * 1024);
        auto progress = reader.feed(buffer);
        if (progress == Progress::header_done) progress = reader.feed(buffer);
        while (progress == Progress::need_more && !reader.header_done()) {
            if (!read()) return 0;
            progress = reader.feed(buffer);
            if (progress == Progress::header_done) progress = reader.feed(buffer);
        }
        while (progress != Progress::failed && !reader.done()) {
            if (!read()) return 0;
            progress = reader.feed(buffer);
        }
        if (progress == Progress::failed) return 0;  // answered, then the connection closes
        auto message = reader.release();
        require(message.count(http::field::transfer_encoding) == 0 || message.chunked());
        auto target = tokengate::proxy::normalize_target(message.target());
        if (!target.ok) continue;  // a 400 on a connection that stays open
        tokengate::proxy::ClientOrigin origin{"127.0.0.1", "127.0.0.1", false, "rid"};
        std::string body(message.body());
        check_upstream(message, target,
                       tokengate::proxy::make_upstream_request(message.base(), target, upstream(), origin,
                                                               tokengate::core::RecycledString(body)));
    }
    return 0;
}
