// SPEC §21's JWT checks without sockets: keys made here with OpenSSL, tokens signed here, so
// every refusal can be made byte for byte (the integration test signs with npm's jose).
#include "tokengate/auth/jwt.hpp"

#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rsa.h>

#include <memory>
#include <nlohmann/json.hpp>

namespace tokengate::auth {
namespace {

using nlohmann::json;

std::string b64url(std::string_view bytes) {
    static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    unsigned value = 0;
    int bits = 0;
    for (unsigned char c : bytes) {
        value = (value << 8) | c;
        bits += 8;
        while (bits >= 6) out += k[(value >> (bits -= 6)) & 63];
    }
    if (bits > 0) out += k[(value << (6 - bits)) & 63];
    return out;
}

std::string bn_bytes(EVP_PKEY* key, const char* name, std::size_t width = 0) {
    BIGNUM* n = nullptr;
    EVP_PKEY_get_bn_param(key, name, &n);
    std::string out(std::max<std::size_t>(width, static_cast<std::size_t>(BN_num_bytes(n))), '\0');
    BN_bn2binpad(n, reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size()));
    BN_free(n);
    return out;
}

struct TestKey {
    std::string alg;
    std::shared_ptr<EVP_PKEY> pkey;
    json jwk;
};

TestKey make_key(const std::string& alg, const std::string& kid) {
    EVP_PKEY* k = nullptr;
    if (alg[0] == 'R' || alg[0] == 'P') k = EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048));
    else if (alg == "ES256") k = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
    else if (alg == "ES384") k = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-384");
    else k = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
    TestKey t{alg, std::shared_ptr<EVP_PKEY>(k, EVP_PKEY_free), {{"kid", kid}, {"alg", alg}, {"use", "sig"}}};
    if (alg[0] == 'R' || alg[0] == 'P') {
        t.jwk["kty"] = "RSA";
        t.jwk["n"] = b64url(bn_bytes(k, OSSL_PKEY_PARAM_RSA_N));
        t.jwk["e"] = b64url(bn_bytes(k, OSSL_PKEY_PARAM_RSA_E));
    } else if (alg[0] == 'E' && alg != "EdDSA") {
        std::size_t size = alg == "ES256" ? 32 : 48;
        t.jwk["kty"] = "EC";
        t.jwk["crv"] = alg == "ES256" ? "P-256" : "P-384";
        t.jwk["x"] = b64url(bn_bytes(k, OSSL_PKEY_PARAM_EC_PUB_X, size));
        t.jwk["y"] = b64url(bn_bytes(k, OSSL_PKEY_PARAM_EC_PUB_Y, size));
    } else {
        unsigned char raw[32];
        std::size_t len = sizeof raw;
        EVP_PKEY_get_raw_public_key(k, raw, &len);
        t.jwk["kty"] = "OKP";
        t.jwk["crv"] = "Ed25519";
        t.jwk["x"] = b64url(std::string_view(reinterpret_cast<char*>(raw), len));
    }
    return t;
}

/// A JWS signature over `input` with `key` as `alg` says (ECDSA turned from DER into r‖s).
std::string sign(const TestKey& key, const std::string& alg, const std::string& input) {
    const EVP_MD* md = alg == "EdDSA"         ? nullptr
                       : alg.ends_with("384") ? EVP_sha384()
                       : alg.ends_with("512") ? EVP_sha512()
                                              : EVP_sha256();
    auto* ctx = EVP_MD_CTX_new();
    EVP_PKEY_CTX* pctx = nullptr;
    EVP_DigestSignInit(ctx, &pctx, md, nullptr, key.pkey.get());
    if (alg == "PS256") {
        EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING);
        EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST);
    }
    std::size_t len = 0;
    EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()), input.size());
    std::string sig(len, '\0');
    EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                   reinterpret_cast<const unsigned char*>(input.data()), input.size());
    sig.resize(len);
    EVP_MD_CTX_free(ctx);
    if (alg == "ES256" || alg == "ES384") {
        std::size_t size = alg == "ES256" ? 32 : 48;
        const auto* p = reinterpret_cast<const unsigned char*>(sig.data());
        ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(sig.size()));
        std::string raw(2 * size, '\0');
        BN_bn2binpad(ECDSA_SIG_get0_r(es), reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(size));
        BN_bn2binpad(ECDSA_SIG_get0_s(es), reinterpret_cast<unsigned char*>(raw.data() + size), static_cast<int>(size));
        ECDSA_SIG_free(es);
        return raw;
    }
    return sig;
}

constexpr double k_now = 1'800'000'000;

json claims(json extra = json::object()) {
    json c = {{"org", "acme"},      {"plan", "pro"},     {"sub", "user-1"}, {"iss", "https://idp.example.com/"},
              {"aud", "tokengate"}, {"exp", k_now + 600}};
    for (auto& [k, v] : extra.items()) c[k] = v;
    return c;
}

std::string token_text(const TestKey& key, const std::string& header_text, const std::string& claims_text,
                       const std::string& alg) {
    auto input = b64url(header_text) + "." + b64url(claims_text);
    return input + "." + b64url(sign(key, alg, input));
}

std::string token(const TestKey& key, const json& c = claims()) {
    return token_text(key, json{{"alg", key.alg}, {"kid", key.jwk["kid"]}, {"typ", "JWT"}}.dump(), c.dump(), key.alg);
}

config::JwtConfig policy() {
    config::JwtConfig p;
    p.issuer = "https://idp.example.com/";
    p.audiences = {"tokengate"};
    p.algorithms = {"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"};
    p.tenant_claim = "org";
    p.tier_claim = "plan";
    p.leeway = 30'000'000'000;
    return p;
}

struct Issuer {
    std::vector<TestKey> keys;
    std::unique_ptr<JwtVerifier> verifier;
    explicit Issuer(std::vector<std::string> algs, config::JwtConfig p = policy()) {
        json set = {{"keys", json::array()}};
        for (const auto& a : algs) {
            keys.push_back(make_key(a, "k-" + a));
            set["keys"].push_back(keys.back().jwk);
        }
        std::string error;
        auto parsed = KeySet::parse(set.dump(), &error);
        EXPECT_TRUE(parsed) << error;
        verifier = std::make_unique<JwtVerifier>(std::move(p), std::move(*parsed));
    }
    std::string refusal(const std::string& t, double now = k_now) const {
        auto r = verifier->verify(t, now);
        auto* no = std::get_if<JwtRefusal>(&r);
        return no ? no->reason : "(accepted)";
    }
};

TEST(Jwt, EveryAlgorithmIsAccepted) {
    Issuer issuer({"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"});
    for (const auto& key : issuer.keys) {
        auto r = issuer.verifier->verify(token(key), k_now);
        auto* who = std::get_if<JwtIdentity>(&r);
        ASSERT_NE(who, nullptr) << key.alg << ": " << std::get<JwtRefusal>(r).reason;
        EXPECT_EQ(who->tenant, "acme");
        EXPECT_EQ(who->tier, "pro");
        EXPECT_EQ(who->subject, "user-1");
    }
}

TEST(Jwt, TimeIssuerAndAudienceAreChecked) {
    Issuer issuer({"ES256"});
    const auto& k = issuer.keys[0];
    EXPECT_EQ(issuer.refusal(token(k), k_now + 600 + 31), "expired");
    EXPECT_EQ(issuer.refusal(token(k), k_now + 600 + 29), "(accepted)") << "within the leeway";
    EXPECT_EQ(issuer.refusal(token(k, claims({{"nbf", k_now + 31}}))), "not yet valid");
    EXPECT_EQ(issuer.refusal(token(k, claims({{"nbf", k_now + 29}}))), "(accepted)");
    EXPECT_EQ(issuer.refusal(token(k, claims({{"iss", "https://evil.example/"}}))), "wrong issuer");
    EXPECT_EQ(issuer.refusal(token(k, claims({{"aud", "other"}}))), "wrong audience");
    EXPECT_EQ(issuer.refusal(token(k, claims({{"aud", json::array({"other", "tokengate"})}}))), "(accepted)");
    EXPECT_EQ(issuer.refusal(token(k, claims({{"aud", json::array({1, 2})}}))), "wrong audience");
    auto no_exp = claims();
    no_exp.erase("exp");
    EXPECT_EQ(issuer.refusal(token(k, no_exp)), "no exp claim");
    EXPECT_EQ(issuer.refusal(token(k, claims({{"exp", "tomorrow"}}))), "malformed exp claim");
    EXPECT_EQ(issuer.refusal(token(k, claims({{"exp", 1e308}}))), "(accepted)") << "a far exp is a number";
    EXPECT_EQ(issuer.refusal(token(k, claims({{"org", 42}}))), "no usable tenant claim");
    EXPECT_EQ(issuer.refusal(token(k, claims({{"org", std::string(300, 'a')}}))), "no usable tenant claim");
}

TEST(Jwt, AnAcceptedTokenIsRememberedButItsTimeIsCheckedEachTime) {
    Issuer issuer({"ES256"});
    auto t = token(issuer.keys[0], claims({{"nbf", k_now - 10}}));
    auto first = issuer.verifier->verify(t, k_now);
    ASSERT_TRUE(std::holds_alternative<JwtIdentity>(first));
    auto id = std::get<JwtIdentity>(first).token_id;
    EXPECT_EQ(id.size(), 16u);
    EXPECT_EQ(id.rfind("jwt-", 0), 0u);
    auto again = issuer.verifier->verify(t, k_now + 1);
    ASSERT_TRUE(std::holds_alternative<JwtIdentity>(again));
    EXPECT_EQ(std::get<JwtIdentity>(again).token_id, id);
    EXPECT_EQ(std::get<JwtIdentity>(again).subject, "user-1");
    // Remembered, still read against the clock: expired past exp + leeway, early before nbf.
    EXPECT_EQ(issuer.refusal(t, k_now - 10 - 31), "not yet valid");
    EXPECT_EQ(issuer.refusal(t, k_now + 600 + 31), "expired");
    EXPECT_EQ(issuer.refusal(t, k_now), "(accepted)") << "checked afresh after it was forgotten";
    // A different token is never taken for a remembered one.
    auto other = t;
    other.back() = other.back() == 'A' ? 'Q' : 'A';
    EXPECT_EQ(issuer.refusal(other), "bad signature");
}

TEST(Jwt, ForgeriesAreRefused) {
    Issuer issuer({"RS256", "ES256"});
    const auto& rs = issuer.keys[0];
    auto good = token(rs);
    // A flipped bit in the signature, and in the claims under the old signature.
    auto flipped = good;
    flipped.back() = flipped.back() == 'A' ? 'B' : 'A';
    EXPECT_EQ(issuer.refusal(flipped), "bad signature");
    auto dot = good.find('.');
    auto other_claims = b64url(claims({{"org", "ghost"}}).dump());
    auto swapped = good.substr(0, dot + 1) + other_claims + good.substr(good.rfind('.'));
    EXPECT_EQ(issuer.refusal(swapped), "bad signature");
    // Another key under our key's kid.
    auto stranger = make_key("RS256", "k-RS256");
    EXPECT_EQ(issuer.refusal(token(stranger)), "bad signature");
    // alg none, with and without a signature part.
    auto none_header = b64url(R"({"alg":"none","typ":"JWT"})");
    EXPECT_EQ(issuer.refusal(none_header + "." + b64url(claims().dump()) + "."), "alg none is refused");
    EXPECT_EQ(issuer.refusal(none_header + "." + b64url(claims().dump()) + ".AAAA"), "alg none is refused");
    // HS256 keyed with the public key's bytes: the algorithm confusion a verifier must not have.
    auto input = b64url(R"({"alg":"HS256","kid":"k-RS256"})") + "." + b64url(claims().dump());
    std::string n = rs.jwk["n"];
    unsigned char mac[32];
    unsigned mac_len = 0;
    HMAC(EVP_sha256(), n.data(), static_cast<int>(n.size()), reinterpret_cast<const unsigned char*>(input.data()),
         input.size(), mac, &mac_len);
    EXPECT_EQ(issuer.refusal(input + "." + b64url(std::string_view(reinterpret_cast<char*>(mac), mac_len))),
              "HMAC algorithms are refused");
    // An ES256 key named by an RS256 token, and the other way round.
    auto crossed = token_text(issuer.keys[1], R"({"alg":"RS256","kid":"k-ES256"})", claims().dump(), "ES256");
    EXPECT_EQ(issuer.refusal(crossed), "the key is not for this algorithm");
    EXPECT_EQ(issuer.refusal(token_text(rs, R"({"alg":"RS256","kid":"nope"})", claims().dump(), "RS256")),
              "unknown key id");
    EXPECT_EQ(issuer.refusal(token_text(rs, R"({"alg":"RS256"})", claims().dump(), "RS256")), "no kid in the header")
        << "two keys: a token must say which";
    EXPECT_EQ(
        issuer.refusal(token_text(rs, R"({"alg":"RS256","kid":"k-RS256","crit":["exp"]})", claims().dump(), "RS256")),
        "unsupported crit header");
}

TEST(Jwt, AnAlgorithmTheConfigLeavesOutIsRefused) {
    auto p = policy();
    p.algorithms = {"ES256"};
    Issuer issuer({"RS256", "ES256"}, p);
    EXPECT_EQ(issuer.refusal(token(issuer.keys[0])), "algorithm not accepted");
    EXPECT_EQ(issuer.refusal(token(issuer.keys[1])), "(accepted)");
}

TEST(Jwt, AKeyTwiceInAnObjectIsRefused) {
    // Signed properly: the refusal is the parser's, not the signature's.
    Issuer issuer({"ES256"});
    const auto& k = issuer.keys[0];
    auto twice = R"({"org":"ghost","org":"acme","iss":"https://idp.example.com/","aud":"tokengate","exp":1800000600})";
    EXPECT_EQ(issuer.refusal(token_text(k, R"({"alg":"ES256","kid":"k-ES256"})", twice, "ES256")), "malformed claims");
    EXPECT_EQ(
        issuer.refusal(token_text(k, R"({"alg":"ES256","kid":"k-ES256","kid":"k-ES256"})", claims().dump(), "ES256")),
        "malformed header");
    auto nested = R"({"org":"acme","iss":"https://idp.example.com/","aud":"tokengate","exp":1800000600,)"
                  R"("x":{"a":1,"a":2}})";
    EXPECT_EQ(issuer.refusal(token_text(k, R"({"alg":"ES256","kid":"k-ES256"})", nested, "ES256")), "malformed claims");
}

TEST(Jwt, MalformedTokensOfEveryShapeAreRefused) {
    Issuer issuer({"EdDSA"});
    auto good = token(issuer.keys[0]);
    EXPECT_EQ(issuer.refusal(good), "(accepted)");
    for (std::string bad : {std::string(""), std::string("."), std::string(".."), std::string("a.b"),
                            std::string("a.b.c.d"), good + ".", "x" + good, good.substr(0, good.find('.')) + "..",
                            std::string("e30.e30.e30"), std::string("!!.e30.e30"), std::string("e30=.e30.")}) {
        EXPECT_NE(issuer.refusal(bad), "(accepted)") << bad;
    }
    EXPECT_EQ(issuer.refusal(std::string(k_max_jwt_bytes + 1, 'a')), "token too large");
    // Deep nesting in a signed payload.
    std::string deep = R"({"org":"acme","exp":1800000600,"x":)" + std::string(40, '[') + std::string(40, ']') + "}";
    EXPECT_EQ(issuer.refusal(token_text(issuer.keys[0], R"({"alg":"EdDSA","kid":"k-EdDSA"})", deep, "EdDSA")),
              "malformed claims");
    // An ES256 signature of the wrong length.
    Issuer es({"ES256"});
    auto t = token(es.keys[0]);
    EXPECT_EQ(es.refusal(t.substr(0, t.rfind('.') + 1) + b64url(std::string(63, 'x'))), "bad signature");
}

TEST(JwtKeySet, KeysThatCannotVerifyAreLeftOutWithTheReason) {
    auto rsa = make_key("RS256", "good");
    json set = {{"keys",
                 {rsa.jwk,
                  {{"kty", "oct"}, {"kid", "secret"}, {"k", "c2VjcmV0"}},
                  {{"kty", "RSA"}, {"kid", "small"}, {"n", b64url(std::string(128, '\xff'))}, {"e", "AQAB"}},
                  {{"kty", "EC"},
                   {"kid", "offcurve"},
                   {"crv", "P-256"},
                   {"x", b64url(std::string(32, '\1'))},
                   {"y", b64url(std::string(32, '\2'))}},
                  {{"kty", "EC"}, {"kid", "k1"}, {"crv", "secp256k1"}, {"x", "AA"}, {"y", "AA"}},
                  {{"kty", "RSA"}, {"kid", "enc"}, {"use", "enc"}, {"n", "AA"}, {"e", "AQAB"}},
                  "not an object"}}};
    std::string error;
    auto keys = KeySet::parse(set.dump(), &error);
    ASSERT_TRUE(keys) << error;
    EXPECT_EQ(keys->size(), 1u);
    EXPECT_NE(keys->find("good"), nullptr);
    ASSERT_EQ(keys->skipped().size(), 6u);
    EXPECT_NE(keys->skipped()[0].find("kty oct cannot verify"), std::string::npos) << keys->skipped()[0];
    EXPECT_NE(keys->skipped()[1].find("2048 to 8192 bits"), std::string::npos) << keys->skipped()[1];
    EXPECT_NE(keys->skipped()[2].find("not a point on its curve"), std::string::npos) << keys->skipped()[2];
    EXPECT_NE(keys->skipped()[3].find("P-256 or P-384"), std::string::npos) << keys->skipped()[3];
    EXPECT_NE(keys->skipped()[4].find("use is enc"), std::string::npos) << keys->skipped()[4];
    for (std::string bad : {"", "[]", "{}", R"({"keys":{}})", R"({"keys":[],"keys":[]})", "{\"keys\":["})
        EXPECT_FALSE(KeySet::parse(bad, &error)) << bad;
}

}  // namespace
}  // namespace tokengate::auth
