#include <gtest/gtest.h>

#include "tokengate/proxy/target.hpp"

namespace tokengate::proxy {
namespace {

std::string normal(std::string_view target) {
    auto t = normalize_target(target);
    return t.ok ? t.text() : "refused: " + std::string(t.why);
}

TEST(Target, EverySpellingOfOnePathIsOnePath) {
    for (auto spelling : {"/v1/chat/completions", "/v1/%63hat/completions", "/v1/./chat/completions",
                          "/v1//chat/completions", "/v1/chat/completions/", "/v1/chat/completions;x",
                          "/v1/chat;jsessionid=1/completions", "/v1/x/../chat/completions", "/v1/%2e/chat/completions",
                          "/v1/x/%2E%2E/chat/completions", "//v1/chat/completions//", "/../v1/chat/completions",
                          "http://gateway.example/v1/chat/completions", "HTTPS://h:1/v1/chat/completions/."})
        EXPECT_EQ(normal(spelling), "/v1/chat/completions") << spelling;
}

TEST(Target, QueriesStayVerbatimAndOtherEscapesAreUpperCased) {
    EXPECT_EQ(normal("/v1/models?x=%2f&y=/a/../b"), "/v1/models?x=%2f&y=/a/../b");
    EXPECT_EQ(normal("/files/a%3ab"), "/files/a%3Ab");
    EXPECT_EQ(normal("/caf%C3%A9"), "/caf%C3%A9");
    EXPECT_EQ(normal("/"), "/");
    EXPECT_EQ(normal("//"), "/");
    EXPECT_EQ(normal("/?q"), "/?q");
    EXPECT_EQ(normal("http://h"), "/");
}

TEST(Target, WhatWouldReachAnotherPathIsRefused) {
    for (auto bad : {"/v1/chat%2Fcompletions", "/v1/chat%2fcompletions", "/v1/chat/completions%00", "/v1/a%5Cb",
                     "/v1/chat/completions%20", "/v1/%0d%0aX: y", "/v1/%", "/v1/%4", "/v1/%zz", "v1/chat", "*",
                     "/v1/a#frag", "/v1/a\\b", "http://h?x"}) {
        auto t = normalize_target(bad);
        EXPECT_FALSE(t.ok) << bad << " became " << t.path;
        EXPECT_FALSE(t.why.empty()) << bad;
    }
    EXPECT_FALSE(normalize_target(std::string_view("/v1/a\0b", 7)).ok);
}

}  // namespace
}  // namespace tokengate::proxy
