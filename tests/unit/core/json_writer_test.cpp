#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tokengate/core/json_writer.hpp"

namespace tokengate::core {
namespace {

TEST(JsonWriter, EscapesAndStaysValidJson) {
    std::string out;
    JsonObjectWriter w(out);
    w.string("path", "/v1/\"x\"\\\n\t\x01")
        .string("bad", std::string_view("caf\xc3\xa9 \xff end", 11))
        .number("cost", 11)
        .number("ms", 0.25)
        .integer("tokens", 64)
        .integer("most", UINT64_MAX)
        .boolean("stream", true)
        .boolean("stopped", false)
        .null("ttfb");
    w.close();
    auto parsed = nlohmann::json::parse(out);  // throws if it is not valid JSON
    EXPECT_EQ(parsed["path"], "/v1/\"x\"\\\n\t\x01");
    EXPECT_EQ(parsed["bad"], "café \xef\xbf\xbd end") << "invalid UTF-8 becomes U+FFFD";
    EXPECT_NE(out.find("\"cost\":11.0"), std::string::npos) << out;
    EXPECT_NE(out.find("\"ms\":0.25"), std::string::npos);
    EXPECT_NE(out.find("\"tokens\":64"), std::string::npos);
    EXPECT_EQ(parsed["most"].get<std::uint64_t>(), UINT64_MAX);
    EXPECT_EQ(parsed["stream"], true);
    EXPECT_EQ(parsed["stopped"], false);
    EXPECT_TRUE(parsed["ttfb"].is_null());
}

TEST(JsonWriter, PlainValuesOfAnyLengthRoundTrip) {
    for (std::size_t length : {0, 1, 125, 126, 127, 128, 1000}) {
        std::string value(length, 'k'), out;
        if (length > 3) value[length / 2] = '\x7f';
        JsonObjectWriter w(out);
        w.string("a_key_of_a_member_written_into_an_access_line_and_longer_than_sixty_bytes", value).string("v", value);
        w.close();
        auto parsed = nlohmann::json::parse(out);
        EXPECT_EQ(parsed["v"], value) << length;
        EXPECT_EQ(parsed["a_key_of_a_member_written_into_an_access_line_and_longer_than_sixty_bytes"], value);
    }
}

// Durations are written from their nanoseconds: the same text as the double's shortest form.
TEST(JsonWriter, MillisecondsReadAsTheirDoubleWouldBeWritten) {
    std::vector<std::int64_t> values{
        0,       1,       5,       10,      999,       1000,       1001,           123456,          999999,
        1000000, 1000001, 4390355, 5000000, 139313542, 1000000000, 12345678901234, 999999999999999, 1000000000000000,
        -1,      -4390355};
    std::mt19937_64 random(5);
    for (int i = 0; i < 20000; ++i) {
        auto digits = 1 + random() % 16;
        std::int64_t v = static_cast<std::int64_t>(random() % 10'000'000'000'000'000ull);
        for (auto d = digits; d < 16; ++d) v /= 10;
        if (random() % 3 == 0) v -= v % 1000;  // whole microseconds, as some clocks give
        values.push_back(v);
    }
    for (auto ns : values) {
        std::string fast, slow;
        append_json_milliseconds(fast, ns);
        append_json_number(slow, static_cast<double>(ns) / 1e6);
        ASSERT_EQ(fast, slow) << ns;
    }
}

TEST(JsonWriter, NestsAnObjectInPlace) {
    std::string out;
    JsonObjectWriter w(out);
    auto error = w.object("error");
    error.string("code", "x").null("param");
    error.close();
    w.integer("n", 1);
    w.close();
    EXPECT_EQ(out, R"({"error":{"code":"x","param":null},"n":1})");
}

// Whole numbers take a faster path: the text must stay what the shortest double gives.
TEST(JsonWriter, WholeNumbersReadAsTheShortestDoubleWrites) {
    auto shortest = [](double v) {
        char buf[32];
        auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
        std::string text(buf, end);
        if (text.find_first_of(".en") == std::string::npos) text += ".0";
        return text;
    };
    std::vector<double> values{1,
                               -1,
                               9,
                               10,
                               11,
                               99999,
                               100000,
                               -100000,
                               120000,
                               123000,
                               1230000,
                               1500000,
                               1e15,
                               1e15 + 1,
                               9007199254740991.0,
                               9007199254740992.0,
                               -9007199254740991.0,
                               1e16,
                               1e300,
                               0.5,
                               -0.0,
                               0.0,
                               180,
                               230,
                               192};
    for (double v = 1; v < 1e17; v = v * 7 + 3) values.push_back(v);
    for (double v = 1000; v < 1e17; v *= 10) values.push_back(v), values.push_back(v * 25), values.push_back(-v * 3);
    for (double v : values) {
        std::string out;
        append_json_number(out, v);
        EXPECT_EQ(out, shortest(v)) << v;
    }
}

// The Redis script's arguments use it bare: every double, whole or not, as to_chars writes it.
TEST(JsonWriter, ShortestNumberIsWhatToCharsWrites) {
    std::vector<double> values{0.0,
                               -0.0,
                               0.1,
                               1.5,
                               1e-300,
                               5e-324,
                               1e300,
                               -2.5e-7,
                               1e15,
                               1e16,
                               0x1p53,
                               0x1p53 - 1,
                               -0x1p53,
                               1e6,
                               1e7,
                               2e5,
                               10000,
                               120000,
                               1500000,
                               228,
                               30000,
                               1733500000123456.0,
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::max()};
    std::mt19937_64 random(7);
    for (int i = 0; i < 20000; ++i) {
        auto bits = random();
        values.push_back(static_cast<double>(bits >> (bits % 60)));  // whole, every size
        values.push_back(static_cast<double>(bits % 1000) * std::pow(10.0, static_cast<double>(bits % 17)));  // zeros
        values.push_back(-static_cast<double>(bits % 997) * std::pow(10.0, static_cast<double>(bits % 16)));
        values.push_back(static_cast<double>(bits >> 11) / static_cast<double>(1 + (bits & 0xffff)));  // not whole
    }
    for (double v : values) {
        char expected[32], got[32];
        std::string_view want(expected,
                              static_cast<std::size_t>(std::to_chars(expected, expected + 32, v).ptr - expected));
        std::string_view have(got, static_cast<std::size_t>(write_shortest_number(got, v) - got));
        ASSERT_EQ(have, want) << v;
    }
}

}  // namespace
}  // namespace tokengate::core
