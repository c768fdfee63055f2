#include <gtest/gtest.h>

#include "tokengate/config/units.hpp"

namespace tokengate::config {
namespace {

constexpr core::Nanos k_ms = 1'000'000;

TEST(ParseDuration, AcceptsUnits) {
    EXPECT_EQ(parse_duration("250ms"), 250 * k_ms);
    EXPECT_EQ(parse_duration("10s"), 10'000 * k_ms);
    EXPECT_EQ(parse_duration("5m"), 300'000 * k_ms);
    EXPECT_EQ(parse_duration("1h"), 3'600'000 * k_ms);
    EXPECT_EQ(parse_duration("1.5s"), 1'500 * k_ms);
    EXPECT_EQ(parse_duration("2"), 2'000 * k_ms);
}

TEST(ParseDuration, RejectsGarbage) {
    EXPECT_FALSE(parse_duration(""));
    EXPECT_FALSE(parse_duration("soon"));
    EXPECT_FALSE(parse_duration("10 parsecs"));
    EXPECT_FALSE(parse_duration("-1s"));
    EXPECT_FALSE(parse_duration("1e30h"));
}

TEST(ParseRate, PerPeriod) {
    EXPECT_DOUBLE_EQ(*parse_rate("10/s"), 10.0);
    EXPECT_DOUBLE_EQ(*parse_rate("600/min"), 10.0);
    EXPECT_DOUBLE_EQ(*parse_rate("1M/day"), 1e6 / 86400.0);
    EXPECT_DOUBLE_EQ(*parse_rate("3600/h"), 1.0);
    EXPECT_DOUBLE_EQ(*parse_rate("0.5/s"), 0.5);
    EXPECT_DOUBLE_EQ(*parse_rate("30/10s"), 3.0);
    EXPECT_DOUBLE_EQ(*parse_rate("7"), 7.0);
    EXPECT_FALSE(parse_rate("10/fortnight"));
    EXPECT_FALSE(parse_rate("ten/s"));
}

TEST(ParseSize, BinaryAndDecimal) {
    EXPECT_EQ(parse_size("4MiB"), 4u << 20);
    EXPECT_EQ(parse_size("16KiB"), 16u << 10);
    EXPECT_EQ(parse_size("1MB"), 1'000'000u);
    EXPECT_EQ(parse_size("512"), 512u);
    EXPECT_FALSE(parse_size("4 parsecs"));
}

TEST(ParseHostPort, Forms) {
    auto a = parse_host_port("0.0.0.0:8080");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->host, "0.0.0.0");
    EXPECT_EQ(a->port, 8080);
    auto b = parse_host_port("[::1]:9090");
    ASSERT_TRUE(b);
    EXPECT_EQ(b->host, "::1");
    EXPECT_EQ(b->port, 9090);
    EXPECT_FALSE(parse_host_port("nowhere"));
    EXPECT_FALSE(parse_host_port("host:99999"));
}

}  // namespace
}  // namespace tokengate::config
