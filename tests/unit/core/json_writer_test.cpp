#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace tokengate::core
