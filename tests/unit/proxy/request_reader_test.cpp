#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>

#include <cstring>

#include "tokengate/proxy/request_reader.hpp"

namespace tokengate::proxy {
namespace {

using Progress = RequestReader::Progress;

/// Feeds `bytes` in pieces of `piece` bytes, as the session would read them.
struct Fed {
    Progress progress = Progress::need_more;
    RequestError error = RequestError::none;
    std::string body;
    std::size_t fields = 0;
    std::size_t left = 0;  // bytes after the request, kept for the next one
};

Fed feed(std::string_view bytes, std::size_t piece) {
    RequestReader reader(4096, 1 << 20);
    boost::beast::flat_buffer buffer;
    Fed out;
    for (std::size_t at = 0; at < bytes.size() && out.progress != Progress::done && out.progress != Progress::failed;) {
        auto n = std::min(piece, bytes.size() - at);
        auto space = buffer.prepare(n);
        std::memcpy(space.data(), bytes.data() + at, n);
        buffer.commit(n);
        at += n;
        do out.progress = reader.feed(buffer);
        while (out.progress == Progress::header_done);
    }
    out.error = reader.error();
    if (out.progress == Progress::done) {
        auto m = reader.release();
        out.body = m.body();
        out.fields = static_cast<std::size_t>(std::distance(m.begin(), m.end()));
    }
    out.left = buffer.size();
    return out;
}

TEST(RequestReader, AChunkedRequestByteByByteWithTrailers) {
    // Beast 1.81 asserted here (a last chunk re-parsed from 4 bytes) before put_buffered waited.
    std::string request =
        "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        "2\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\nGET / HTTP/1.1\r\n";
    for (std::size_t piece : {1, 2, 3, 4, 7, 1000}) {
        auto fed = feed(request, piece);
        ASSERT_EQ(fed.progress, Progress::done) << piece;
        EXPECT_EQ(fed.body, "{}") << piece;
        EXPECT_EQ(fed.fields, 2u) << "Host and Transfer-Encoding; the trailer is dropped";
        if (piece >= request.size()) {
            EXPECT_GT(fed.left, 0u) << "the next request's bytes stay buffered";
        }
    }
}

TEST(RequestReader, FramingErrorsNameTheirCause) {
    struct Case {
        const char* bytes;
        RequestError error;
    } cases[] = {
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", RequestError::bad_transfer_encoding},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
         RequestError::unsupported_transfer_coding},
        {"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", RequestError::obs_fold},
        {"GET / HTTP/1.1\r\n\r\n", RequestError::bad_host},
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", RequestError::bad_host},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000000\r\n\r\n", RequestError::body_too_large},
        {"NOT HTTP\r\n\r\n", RequestError::malformed},
    };
    for (const auto& c : cases) {
        for (std::size_t piece : {1, 1000}) {
            auto fed = feed(c.bytes, piece);
            EXPECT_EQ(fed.progress, Progress::failed) << c.bytes;
            EXPECT_EQ(fed.error, c.error) << c.bytes;
        }
    }
    auto long_head = feed("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(5000, 'a'), 100);
    EXPECT_EQ(long_head.error, RequestError::header_too_large) << "refused before the header ends";
}

}  // namespace
}  // namespace tokengate::proxy
