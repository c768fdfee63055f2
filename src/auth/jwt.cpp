#include "tokengate/auth/jwt.hpp"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokengate/config/loader.hpp"
#include "tokengate/core/base64.hpp"
#include "tokengate/core/sha256.hpp"

namespace tokengate::auth {

namespace {

using json = nlohmann::json;

enum class KeyKind { rsa, p256, p384, ed25519 };

/// Parsed JSON of a token's header or claims, or of a JWKS: an object, no key twice in any
/// object (two `exp`s or two tenant claims would be read differently by different parsers),
/// nested at most 16 deep.
std::optional<json> strict_object(std::string_view text) {
    struct Refused {};
    std::vector<std::vector<std::string>> open;
    try {
        auto parsed = json::parse(text, [&](int depth, json::parse_event_t event, json& value) {
            if (depth > 16) throw Refused{};
            switch (event) {
                case json::parse_event_t::object_start: open.emplace_back(); break;
                case json::parse_event_t::object_end:
                    if (!open.empty()) open.pop_back();
                    break;
                case json::parse_event_t::key: {
                    auto key = value.get<std::string>();
                    auto& seen = open.back();
                    if (std::find(seen.begin(), seen.end(), key) != seen.end()) throw Refused{};
                    seen.push_back(std::move(key));
                    break;
                }
                default: break;
            }
            return true;
        });
        if (!parsed.is_object()) return std::nullopt;
        return parsed;
    } catch (const Refused&) {
        return std::nullopt;
    } catch (const json::exception&) {
        return std::nullopt;
    }
}

const std::string* string_member(const json& object, const char* name) {
    auto it = object.find(name);
    return it != object.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}

struct PkeyFree {
    void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

struct Params {
    OSSL_PARAM_BLD* build = OSSL_PARAM_BLD_new();
    OSSL_PARAM* params = nullptr;
    std::vector<BIGNUM*> numbers;
    ~Params() {
        OSSL_PARAM_free(params);
        OSSL_PARAM_BLD_free(build);
        for (auto* n : numbers) BN_free(n);
    }
    bool number(const char* key, const std::string& big_endian) {
        auto* n = BN_bin2bn(reinterpret_cast<const unsigned char*>(big_endian.data()),
                            static_cast<int>(big_endian.size()), nullptr);
        if (!n) return false;
        numbers.push_back(n);
        return OSSL_PARAM_BLD_push_BN(build, key, n) == 1;
    }
    /// The public key from these parameters, of OpenSSL's key type `type`; null if they make none.
    Pkey make(const char* type) {
        params = OSSL_PARAM_BLD_to_param(build);
        if (!params) return nullptr;
        EVP_PKEY* key = nullptr;
        auto* ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr);
        bool ok =
            ctx && EVP_PKEY_fromdata_init(ctx) == 1 && EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) == 1;
        EVP_PKEY_CTX_free(ctx);
        return ok ? Pkey(key) : nullptr;
    }
};

/// A JWK's public key, or why it is left out.
std::variant<std::pair<KeyKind, Pkey>, std::string> public_key(const json& jwk) {
    const auto* kty = string_member(jwk, "kty");
    if (!kty) return std::string("no kty");
    auto component = [&](const char* name) -> std::optional<std::string> {
        const auto* text = string_member(jwk, name);
        if (!text) return std::nullopt;
        return core::base64url_decode(*text);
    };
    if (*kty == "RSA") {
        auto n = component("n"), e = component("e");
        if (!n || !e || n->empty() || e->empty()) return std::string("an RSA key needs n and e");
        // Under 2048 bits is forgeable in practice; over 8192 only makes each check slow.
        std::size_t bits = n->size() * 8;
        if (bits < 2048 || bits > 8192 + 8) return std::string("an RSA key must have 2048 to 8192 bits");
        if (e->size() > 8) return std::string("an RSA exponent of more than 64 bits");
        Params p;
        if (!p.number(OSSL_PKEY_PARAM_RSA_N, *n) || !p.number(OSSL_PKEY_PARAM_RSA_E, *e))
            return std::string("a bad RSA key");
        auto key = p.make("RSA");
        if (!key || EVP_PKEY_get_bits(key.get()) < 2048) return std::string("a bad RSA key");
        return std::pair{KeyKind::rsa, std::move(key)};
    }
    if (*kty == "EC") {
        const auto* crv = string_member(jwk, "crv");
        if (!crv || (*crv != "P-256" && *crv != "P-384")) return std::string("an EC key must be on P-256 or P-384");
        std::size_t size = *crv == "P-256" ? 32 : 48;
        auto x = component("x"), y = component("y");
        if (!x || !y || x->size() != size || y->size() != size)
            return std::string("an EC key needs x and y of its curve's size");
        std::string point = "\x04" + *x + *y;
        Params p;
        const char* group = *crv == "P-256" ? "prime256v1" : "secp384r1";
        if (OSSL_PARAM_BLD_push_utf8_string(p.build, OSSL_PKEY_PARAM_GROUP_NAME, group, 0) != 1 ||
            OSSL_PARAM_BLD_push_octet_string(p.build, OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()) != 1)
            return std::string("a bad EC key");
        auto key = p.make("EC");
        if (!key) return std::string("an EC key whose x and y are not a point on its curve");
        // A point off the curve would let a signature leak nothing but prove nothing either.
        auto* check = EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr);
        bool on_curve = check && EVP_PKEY_public_check(check) == 1;
        EVP_PKEY_CTX_free(check);
        if (!on_curve) return std::string("an EC key whose x and y are not a point on its curve");
        return std::pair{*crv == "P-256" ? KeyKind::p256 : KeyKind::p384, std::move(key)};
    }
    if (*kty == "OKP") {
        const auto* crv = string_member(jwk, "crv");
        if (!crv || *crv != "Ed25519") return std::string("an OKP key must be Ed25519");
        auto x = component("x");
        if (!x || x->size() != 32) return std::string("an Ed25519 key needs x of 32 bytes");
        Pkey key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr,
                                             reinterpret_cast<const unsigned char*>(x->data()), x->size()));
        if (!key) return std::string("a bad Ed25519 key");
        return std::pair{KeyKind::ed25519, std::move(key)};
    }
    return "kty " + *kty + " cannot verify a signature with a public key";
}

KeyKind kind_for(JwsAlgorithm alg) {
    switch (alg) {
        case JwsAlgorithm::es256: return KeyKind::p256;
        case JwsAlgorithm::es384: return KeyKind::p384;
        case JwsAlgorithm::eddsa: return KeyKind::ed25519;
        default: return KeyKind::rsa;
    }
}

const char* algorithm_name(JwsAlgorithm alg) {
    switch (alg) {
        case JwsAlgorithm::rs256: return "RS256";
        case JwsAlgorithm::rs384: return "RS384";
        case JwsAlgorithm::rs512: return "RS512";
        case JwsAlgorithm::ps256: return "PS256";
        case JwsAlgorithm::es256: return "ES256";
        case JwsAlgorithm::es384: return "ES384";
        case JwsAlgorithm::eddsa: return "EdDSA";
    }
    return "?";
}

const EVP_MD* digest_for(JwsAlgorithm alg) {
    switch (alg) {
        case JwsAlgorithm::rs384:
        case JwsAlgorithm::es384: return EVP_sha384();
        case JwsAlgorithm::rs512: return EVP_sha512();
        case JwsAlgorithm::eddsa: return nullptr;  // Ed25519 hashes inside
        default: return EVP_sha256();
    }
}

/// JWS's ECDSA signature is r‖s, each the curve's size (RFC 7518 §3.4); OpenSSL wants DER.
std::optional<std::string> ecdsa_der(std::string_view raw, std::size_t size) {
    if (raw.size() != 2 * size) return std::nullopt;
    auto* sig = ECDSA_SIG_new();
    if (!sig) return std::nullopt;
    auto* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()), static_cast<int>(size), nullptr);
    auto* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data() + size), static_cast<int>(size), nullptr);
    std::optional<std::string> out;
    if (r && s && ECDSA_SIG_set0(sig, r, s) == 1) {
        r = s = nullptr;  // the signature owns them now
        int n = i2d_ECDSA_SIG(sig, nullptr);
        if (n > 0) {
            std::string der(static_cast<std::size_t>(n), '\0');
            auto* at = reinterpret_cast<unsigned char*>(der.data());
            if (i2d_ECDSA_SIG(sig, &at) == n) out = std::move(der);
        }
    }
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return out;
}

bool signature_holds(EVP_PKEY* key, JwsAlgorithm alg, std::string_view signed_part, std::string_view signature) {
    std::string der;
    if (alg == JwsAlgorithm::es256 || alg == JwsAlgorithm::es384) {
        auto converted = ecdsa_der(signature, alg == JwsAlgorithm::es256 ? 32 : 48);
        if (!converted) return false;
        der = std::move(*converted);
        signature = der;
    }
    auto* ctx = EVP_MD_CTX_new();
    if (!ctx) return false;
    EVP_PKEY_CTX* pctx = nullptr;
    bool ok = EVP_DigestVerifyInit(ctx, &pctx, digest_for(alg), nullptr, key) == 1;
    if (ok && alg == JwsAlgorithm::ps256)
        ok = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
             EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) == 1;
    ok = ok && EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                                reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size()) == 1;
    EVP_MD_CTX_free(ctx);
    ERR_clear_error();  // a failed check leaves OpenSSL's error queue for this thread to empty
    return ok;
}

bool base64url_text(std::string_view part) {
    return !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    });
}

/// A time claim: absent, a finite number of seconds, or malformed.
enum class TimeClaim { absent, present, malformed };
TimeClaim time_claim(const json& claims, const char* name, double& out) {
    auto it = claims.find(name);
    if (it == claims.end()) return TimeClaim::absent;
    if (!it->is_number()) return TimeClaim::malformed;
    out = it->get<double>();
    return std::isfinite(out) ? TimeClaim::present : TimeClaim::malformed;
}

}  // namespace

struct KeySet::Key {
    std::string kid;
    std::string alg;  // the JWK's own `alg`, if it names one: then only that one
    KeyKind kind;
    Pkey pkey;
};

std::optional<JwsAlgorithm> parse_jws_algorithm(std::string_view name) {
    for (auto alg : {JwsAlgorithm::rs256, JwsAlgorithm::rs384, JwsAlgorithm::rs512, JwsAlgorithm::ps256,
                     JwsAlgorithm::es256, JwsAlgorithm::es384, JwsAlgorithm::eddsa})
        if (name == algorithm_name(alg)) return alg;
    return std::nullopt;
}

std::optional<KeySet> KeySet::parse(std::string_view text, std::string* error) {
    auto set = strict_object(text);
    const json* keys = set && set->contains("keys") ? &(*set)["keys"] : nullptr;
    if (!keys || !keys->is_array()) {
        if (error) *error = "not a JWKS (a JSON object with a \"keys\" array, no key twice)";
        return std::nullopt;
    }
    KeySet out;
    std::size_t index = 0;
    for (const auto& jwk : *keys) {
        auto name = "key " + std::to_string(index++);
        if (!jwk.is_object()) {
            out.skipped_.push_back(name + ": not an object");
            continue;
        }
        const auto* kid = string_member(jwk, "kid");
        if (kid) name = "key '" + kid->substr(0, 64) + "'";
        if (const auto* use = string_member(jwk, "use"); use && *use != "sig") {
            out.skipped_.push_back(name + ": use is " + use->substr(0, 16) + ", not sig");
            continue;
        }
        auto made = public_key(jwk);
        if (auto* why = std::get_if<std::string>(&made)) {
            out.skipped_.push_back(name + ": " + *why);
            continue;
        }
        auto& [kind, pkey] = std::get<0>(made);
        auto key = std::make_shared<Key>();
        key->kid = kid ? *kid : "";
        if (const auto* alg = string_member(jwk, "alg")) key->alg = *alg;
        key->kind = kind;
        key->pkey = std::move(pkey);
        out.keys_.push_back(std::move(key));
    }
    return out;
}

const KeySet::Key* KeySet::find(std::string_view kid) const {
    for (const auto& k : keys_)
        if (k->kid == kid) return k.get();
    return nullptr;
}

bool looks_like_jwt(std::string_view bearer) {
    auto first = bearer.find('.');
    if (first == std::string_view::npos) return false;
    auto second = bearer.find('.', first + 1);
    if (second == std::string_view::npos || bearer.find('.', second + 1) != std::string_view::npos) return false;
    return base64url_text(bearer.substr(0, first)) && base64url_text(bearer.substr(first + 1, second - first - 1)) &&
           (second + 1 == bearer.size() || base64url_text(bearer.substr(second + 1)));
}

JwtVerifier::JwtVerifier(config::JwtConfig policy, KeySet keys) : policy_(std::move(policy)), keys_(std::move(keys)) {
    for (const auto& name : policy_.algorithms)
        if (auto alg = parse_jws_algorithm(name)) algorithms_.push_back(*alg);
}

std::variant<JwtIdentity, JwtRefusal> JwtVerifier::verify(std::string_view token, double now) const {
    if (token.size() > k_max_jwt_bytes) return JwtRefusal{"token too large"};
    if (!looks_like_jwt(token)) return JwtRefusal{"malformed token"};
    auto digest = core::sha256(token);
    std::string key(reinterpret_cast<const char*>(digest.data()), digest.size());
    auto& shard = accepted_[digest[0] % k_shards];
    double leeway = static_cast<double>(policy_.leeway) / 1e9;
    {
        std::lock_guard lock(shard.mutex);
        if (auto it = shard.tokens.find(key); it != shard.tokens.end()) {
            if (now > it->second.exp + leeway) {
                shard.tokens.erase(it);
                return JwtRefusal{"expired"};
            }
            if (now + leeway < it->second.nbf) return JwtRefusal{"not yet valid"};
            return it->second.who;
        }
    }
    Accepted accepted;
    auto result = check(token, now, accepted);
    if (auto* who = std::get_if<JwtIdentity>(&result)) {
        who->token_id = "jwt-" + core::to_hex(digest.data(), 6);
        accepted.who = *who;
        std::lock_guard lock(shard.mutex);
        // Full: one goes to make room. Which one matters little; a client's next request puts
        // its token back after one more signature check.
        if (shard.tokens.size() >= k_tokens_per_shard) shard.tokens.erase(shard.tokens.begin());
        shard.tokens.emplace(std::move(key), std::move(accepted));
    }
    return result;
}

std::variant<JwtIdentity, JwtRefusal> JwtVerifier::check(std::string_view token, double now, Accepted& times) const {
    auto refuse = [](std::string reason) { return JwtRefusal{std::move(reason)}; };
    auto first = token.find('.'), second = token.rfind('.');
    auto header_text = core::base64url_decode(token.substr(0, first));
    auto header = header_text ? strict_object(*header_text) : std::nullopt;
    if (!header) return refuse("malformed header");
    const auto* alg_name = string_member(*header, "alg");
    if (!alg_name) return refuse("no alg in the header");
    if (*alg_name == "none") return refuse("alg none is refused");
    if (alg_name->rfind("HS", 0) == 0) return refuse("HMAC algorithms are refused");
    auto alg = parse_jws_algorithm(*alg_name);
    if (!alg || std::find(algorithms_.begin(), algorithms_.end(), *alg) == algorithms_.end())
        return refuse("algorithm not accepted");
    // RFC 7515 §4.1.11: an extension the token insists on and we do not know is a refusal.
    if (header->contains("crit")) return refuse("unsupported crit header");
    const KeySet::Key* key = nullptr;
    if (auto kid = header->find("kid"); kid != header->end()) {
        if (!kid->is_string()) return refuse("malformed kid");
        key = keys_.find(kid->get_ref<const std::string&>());
        if (!key) return refuse("unknown key id");
    } else {
        key = keys_.only();  // a token without kid is matched only when there is no choice
        if (!key) return refuse("no kid in the header");
    }
    if (key->kind != kind_for(*alg) || (!key->alg.empty() && key->alg != *alg_name))
        return refuse("the key is not for this algorithm");
    auto signature = core::base64url_decode(token.substr(second + 1));
    if (!signature || !signature_holds(key->pkey.get(), *alg, token.substr(0, second), *signature))
        return refuse("bad signature");
    // Only a signed payload is read.
    auto payload_text = core::base64url_decode(token.substr(first + 1, second - first - 1));
    auto claims = payload_text ? strict_object(*payload_text) : std::nullopt;
    if (!claims) return refuse("malformed claims");
    double leeway = static_cast<double>(policy_.leeway) / 1e9;
    double exp = 0, nbf = 0;
    switch (time_claim(*claims, "exp", exp)) {
        case TimeClaim::absent: return refuse("no exp claim");
        case TimeClaim::malformed: return refuse("malformed exp claim");
        case TimeClaim::present:
            if (now > exp + leeway) return refuse("expired");
            times.exp = exp;
    }
    switch (time_claim(*claims, "nbf", nbf)) {
        case TimeClaim::absent: break;
        case TimeClaim::malformed: return refuse("malformed nbf claim");
        case TimeClaim::present:
            if (now + leeway < nbf) return refuse("not yet valid");
            times.nbf = nbf;
    }
    if (!policy_.issuer.empty()) {
        const auto* iss = string_member(*claims, "iss");
        if (!iss || *iss != policy_.issuer) return refuse("wrong issuer");
    }
    if (!policy_.audiences.empty()) {
        auto it = claims->find("aud");
        auto accepted = [&](const json& a) {
            return a.is_string() && std::find(policy_.audiences.begin(), policy_.audiences.end(),
                                              a.get_ref<const std::string&>()) != policy_.audiences.end();
        };
        bool ok =
            it != claims->end() && (accepted(*it) || (it->is_array() && std::any_of(it->begin(), it->end(), accepted)));
        if (!ok) return refuse("wrong audience");
    }
    JwtIdentity who;
    const auto* tenant = string_member(*claims, policy_.tenant_claim.c_str());
    if (!tenant || tenant->empty() || tenant->size() > 256) return refuse("no usable tenant claim");
    who.tenant = *tenant;
    if (!policy_.tier_claim.empty())
        if (const auto* tier = string_member(*claims, policy_.tier_claim.c_str())) who.tier = tier->substr(0, 256);
    if (const auto* sub = string_member(*claims, "sub")) who.subject = sub->substr(0, 256);
    return who;
}

std::variant<KeySet, std::string> read_jwks(std::string_view text) {
    std::string error;
    auto keys = KeySet::parse(text, &error);
    if (!keys) return error;
    if (keys->size() == 0) {
        std::string why;
        for (const auto& s : keys->skipped()) why += (why.empty() ? "" : "; ") + s;
        return "it holds no usable signing key" + (why.empty() ? std::string() : " (" + why + ")");
    }
    return std::move(*keys);
}

std::shared_ptr<JwtIssuer> load_jwt_issuer(const config::GatewayConfig& config, const JwtIssuer* previous) {
    if (!config.auth.jwt) return nullptr;
    auto issuer = std::make_shared<JwtIssuer>(*config.auth.jwt);
    if (!config.auth.jwt->jwks_url.empty()) {
        if (previous && previous->policy().jwks_url == config.auth.jwt->jwks_url)
            if (auto kept = previous->verifier()) issuer->install(kept->keys());
        return issuer;
    }
    const auto& file = config.auth.jwt->jwks_file;
    auto fail = [&](const std::string& message) {
        throw config::ConfigError(config.source_path, file.at.line, file.at.column, message);
    };
    std::ifstream in(file.path, std::ios::binary);
    if (!in) fail("cannot read the JWKS file " + file.path);
    std::ostringstream text;
    text << in.rdbuf();
    if (text.str().size() > k_max_jwks_bytes) fail("the JWKS file " + file.path + " is over 1 MiB");
    auto keys = read_jwks(text.str());
    if (auto* why = std::get_if<std::string>(&keys)) fail(file.path + ": " + *why);
    issuer->install(std::move(std::get<KeySet>(keys)));
    return issuer;
}

}  // namespace tokengate::auth
