#include <gtest/gtest.h>

#include "tokengate/proxy/message.hpp"
#include "tokengate/proxy/wire.hpp"

namespace wire = tokengate::proxy::wire;
namespace http = boost::beast::http;

TEST(Wire, StatusLineUsesTheVersionAndTheStandardReasonWhenNoneIsGiven) {
    std::string out;
    wire::status_line(out, 11, 429);
    wire::status_line(out, 10, 200, "Fine");
    wire::status_line(out, 11, 599);
    EXPECT_EQ(out,
              "HTTP/1.1 429 Too Many Requests\r\nHTTP/1.0 200 Fine\r\nHTTP/1.1 599 Network Connect Timeout Error\r\n");
}

TEST(Wire, ConnectionFieldOnlyWhenItDiffersFromTheVersionsDefault) {
    std::string out;
    wire::connection(out, 11, true);
    EXPECT_EQ(out, "");
    wire::connection(out, 11, false);
    EXPECT_EQ(out, "Connection: close\r\n");
    out.clear();
    wire::connection(out, 10, true);
    EXPECT_EQ(out, "Connection: keep-alive\r\n");
    out.clear();
    wire::connection(out, 10, false);
    EXPECT_EQ(out, "");
}

TEST(Wire, ChunkSizeLineIsLowercaseHex) {
    char buffer[24];
    EXPECT_EQ(wire::chunk_size_line(1, buffer), "1\r\n");
    EXPECT_EQ(wire::chunk_size_line(0x1a2b, buffer), "1a2b\r\n");
    EXPECT_EQ(wire::chunk_size_line(SIZE_MAX, buffer), "ffffffffffffffff\r\n");
}

TEST(Wire, ForwardableFieldsDropHopByHopNamedAndReplacedFields) {
    http::fields f;
    f.insert("Content-Type", "application/json");
    f.insert("Connection", "keep-alive, X-Hop ,x-other");
    f.insert("X-Hop", "1");
    f.insert("x-other", "2");
    f.insert("Keep-Alive", "timeout=5");
    f.insert("Transfer-Encoding", "chunked");
    f.insert("TE", "trailers");
    f.insert("X-RateLimit-Limit", "99");
    f.insert("Set-Cookie", "a=1");
    f.insert("Set-Cookie", "b=2");
    std::string out;
    wire::forwardable_fields(
        out, f, [](http::field, std::string_view name) { return boost::beast::iequals(name, "x-ratelimit-limit"); });
    EXPECT_EQ(out, "Content-Type: application/json\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n");
}

TEST(Wire, WithoutAConnectionFieldOnlyTheStandardHopByHopFieldsGo) {
    http::fields f;
    f.insert("Upgrade", "h2c");
    f.insert("Proxy-Authorization", "Basic x");
    f.insert("X-Kept", "yes");
    std::string out;
    wire::forwardable_fields(out, f, nullptr);
    EXPECT_EQ(out, "X-Kept: yes\r\n");
}

// The pass over a head's fields answers as Beast's own lookups do: the first of several, any
// case, "" when absent.
TEST(Wire, FieldLookupsAnswerAsBeastsOwn) {
    tokengate::proxy::Fields fields;
    fields.insert("X-Forwarded-For", "10.0.0.1");
    fields.insert(http::field::host, "a.example");
    fields.insert("x-forwarded-for", "10.0.0.2");
    fields.insert("HOST", "b.example");
    fields.insert("X-Api-Key", "k");
    for (auto name : {"x-forwarded-for", "X-FORWARDED-FOR", "x-api-key", "host", "x-missing", "x-forwarded-fo"})
        EXPECT_EQ(tokengate::proxy::first_field(fields, name), std::string_view(fields[name])) << name;
    EXPECT_EQ(tokengate::proxy::first_field(fields, http::field::host), "a.example");
    EXPECT_EQ(tokengate::proxy::first_field(fields, http::field::authorization), "");
    EXPECT_EQ(tokengate::proxy::count_fields(fields, http::field::host), fields.count(http::field::host));
    EXPECT_EQ(tokengate::proxy::count_fields(fields, http::field::host), 2u);
}
