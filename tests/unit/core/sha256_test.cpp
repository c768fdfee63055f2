#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <vector>

#include "tokengate/core/base64.hpp"
#include "tokengate/core/cidr.hpp"
#include "tokengate/core/sha256.hpp"

namespace tokengate::core {
namespace {

TEST(Sha256, KnownVectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex("test"), "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
    // 55, 56 and 64 bytes straddle the one-block / two-block padding boundary.
    EXPECT_EQ(sha256_hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    EXPECT_EQ(sha256_hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Hex, EveryByteInTwoLowercaseDigitsAtAnyLength) {
    for (std::size_t size : {0, 1, 31, 32, 33, 100}) {
        std::vector<std::uint8_t> bytes(size);
        std::string expected;
        for (std::size_t i = 0; i < size; ++i) {
            bytes[i] = static_cast<std::uint8_t>(i * 37 + 5);
            char two[3];
            std::snprintf(two, sizeof two, "%02x", bytes[i]);
            expected += two;
        }
        EXPECT_EQ(to_hex(bytes.data(), size), expected) << size;
    }
}

TEST(DigestFromHex, TakesSixtyFourLowercaseHexDigitsOnly) {
    auto hex = sha256_hex("abc");
    auto raw = digest_from_hex(hex);
    ASSERT_TRUE(raw);
    auto d = sha256("abc");
    EXPECT_EQ(*raw, std::string(reinterpret_cast<const char*>(d.data()), d.size()));
    EXPECT_FALSE(digest_from_hex(std::string_view(hex).substr(1)));
    std::string longer = hex, upper = hex, not_hex = hex;
    longer.push_back('0');
    EXPECT_FALSE(digest_from_hex(longer));
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_FALSE(digest_from_hex(upper));
    not_hex.back() = 'g';
    EXPECT_FALSE(digest_from_hex(not_hex));
}

TEST(ConstantTimeEqual, ComparesWholeStrings) {
    EXPECT_TRUE(constant_time_equal("abc", "abc"));
    EXPECT_FALSE(constant_time_equal("abc", "abd"));
    EXPECT_FALSE(constant_time_equal("abc", "abcd"));
}

TEST(Cidr, MatchesV4AndV6) {
    auto net = Cidr::parse("10.0.0.0/8");
    ASSERT_TRUE(net);
    EXPECT_TRUE(net->contains(*parse_ip("10.1.2.3")));
    EXPECT_FALSE(net->contains(*parse_ip("11.0.0.1")));
    auto host = Cidr::parse("127.0.0.1");
    ASSERT_TRUE(host);
    EXPECT_TRUE(host->contains(*parse_ip("127.0.0.1")));
    EXPECT_FALSE(host->contains(*parse_ip("127.0.0.2")));
    auto v6 = Cidr::parse("fd00::/8");
    ASSERT_TRUE(v6);
    EXPECT_TRUE(v6->contains(*parse_ip("fd12::1")));
    EXPECT_FALSE(v6->contains(*parse_ip("fe80::1")));
    EXPECT_FALSE(Cidr::parse("10.0.0.0/33"));
    EXPECT_FALSE(Cidr::parse("not-an-ip"));
}

TEST(Base64, DecodesWhatBasicAuthCarries) {
    EXPECT_EQ(base64_decode("YWRtaW46c2VjcmV0"), "admin:secret");
    EXPECT_EQ(base64_decode("YQ=="), "a");
    EXPECT_EQ(base64_decode("YWI="), "ab");
    EXPECT_EQ(base64_decode(""), "");
    EXPECT_EQ(base64_decode("YQ"), std::nullopt) << "not whole quanta";
    EXPECT_EQ(base64_decode("Y!!="), std::nullopt);
}

TEST(Base64, DecodesJoseBase64UrlInItsOneSpelling) {
    EXPECT_EQ(base64url_decode("YQ"), "a");
    EXPECT_EQ(base64url_decode("YWI"), "ab");
    EXPECT_EQ(base64url_decode("-_8"), "\xfb\xff");
    EXPECT_EQ(base64url_decode(""), "");
    EXPECT_EQ(base64url_decode("YR"), std::nullopt) << "'a' with a low bit set that no byte holds";
    EXPECT_EQ(base64url_decode("YWJ"), std::nullopt) << "likewise for two bytes";
    EXPECT_EQ(base64url_decode("YQ=="), std::nullopt) << "JOSE writes no padding";
    EXPECT_EQ(base64url_decode("+/8"), std::nullopt) << "the standard alphabet's + and /";
    EXPECT_EQ(base64url_decode("YWJjZ"), std::nullopt) << "no byte ends after one character";
}

}  // namespace
}  // namespace tokengate::core
