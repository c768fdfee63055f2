#pragma once

// JWT bearer tokens (SPEC §21): RFC 7515's compact JWS, verified with the issuer's public keys
// (RFC 7517's JWKS) through OpenSSL's EVP API; then RFC 7519's exp, nbf, iss and aud.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tokengate/config/config.hpp"

namespace tokengate::auth {

/// The signatures accepted. `none` and the HMACs are not among them: a verifier holding only
/// public keys must never take one of those for a shared secret.
enum class JwsAlgorithm { rs256, rs384, rs512, ps256, es256, es384, eddsa };

std::optional<JwsAlgorithm> parse_jws_algorithm(std::string_view name);

/// A JWKS's usable keys, by `kid`. Keys of kinds it cannot verify with (symmetric, encryption
/// only, an unknown curve, RSA under 2048 bits) are left out, each with a note why.
class KeySet {
public:
    struct Key;
    /// nullopt with `error` set when `json` is not a JWKS at all.
    static std::optional<KeySet> parse(std::string_view json, std::string* error);
    const Key* find(std::string_view kid) const;
    /// The one key, if the set has exactly one.
    const Key* only() const { return keys_.size() == 1 ? keys_.front().get() : nullptr; }
    std::size_t size() const { return keys_.size(); }
    const std::vector<std::string>& skipped() const { return skipped_; }

private:
    std::vector<std::shared_ptr<const Key>> keys_;
    std::vector<std::string> skipped_;
};

/// Who a verified token says the caller is.
struct JwtIdentity {
    std::string tenant;    // `tenant_claim`'s value
    std::string tier;      // `tier_claim`'s value, if configured and present
    std::string subject;   // `sub`, if present
    std::string token_id;  // "jwt-" + 12 hex digits of the token's SHA-256: names it in the log
};

/// Why a token was refused, fit for the 401's message and the log (it never quotes the token).
struct JwtRefusal {
    std::string reason;
};

/// True when a Bearer value has the shape of a compact JWS: three base64url parts.
bool looks_like_jwt(std::string_view bearer);

/// Verifies tokens against one issuer's policy and keys. Its policy and keys are fixed once
/// made: a refreshed JWKS makes a new verifier (and so forgets what the old keys accepted).
class JwtVerifier {
public:
    JwtVerifier(config::JwtConfig policy, KeySet keys);
    JwtVerifier(const JwtVerifier&) = delete;
    JwtVerifier& operator=(const JwtVerifier&) = delete;
    /// `now` in Unix seconds. A token accepted before is known by its SHA-256 and only its times
    /// are checked again: a client sends one token for its whole life, and a signature check
    /// costs 20–470 µs (bench/jwt_bench.cpp).
    std::variant<JwtIdentity, JwtRefusal> verify(std::string_view token, double now) const;
    const KeySet& keys() const { return keys_; }

private:
    struct Accepted {
        JwtIdentity who;
        double exp = 0, nbf = 0;
    };
    struct Shard {
        std::mutex mutex;
        std::unordered_map<std::string, Accepted> tokens;  // by the token's SHA-256, never the token
    };
    static constexpr std::size_t k_shards = 16, k_tokens_per_shard = 1024;

    std::variant<JwtIdentity, JwtRefusal> check(std::string_view token, double now, Accepted& times) const;

    config::JwtConfig policy_;
    std::vector<JwsAlgorithm> algorithms_;
    KeySet keys_;
    mutable std::array<Shard, k_shards> accepted_;
};

/// `auth.jwt`'s verifier of the moment. With `jwks_file` its keys are read when it is made;
/// with `jwks_url` they are installed by each fetch (server/jwks_watch.cpp), and until the first
/// one there is no verifier.
class JwtIssuer {
public:
    explicit JwtIssuer(config::JwtConfig policy) : policy_(std::move(policy)) {}
    const config::JwtConfig& policy() const { return policy_; }
    void install(KeySet keys) {
        current_.store(std::make_shared<const JwtVerifier>(policy_, std::move(keys)), std::memory_order_release);
    }
    /// Null until keys are installed.
    std::shared_ptr<const JwtVerifier> verifier() const { return current_.load(std::memory_order_acquire); }

private:
    config::JwtConfig policy_;
    std::atomic<std::shared_ptr<const JwtVerifier>> current_;
};

/// `auth.jwt`'s issuer, or null without `auth.jwt`. A JWKS file is read now: throws
/// config::ConfigError, at the file's place in the config, for a file that is not a JWKS or
/// holds no key it could use. A JWKS URL's keys are fetched later; a reload keeps those
/// `previous` fetched from the same URL meanwhile.
std::shared_ptr<JwtIssuer> load_jwt_issuer(const config::GatewayConfig& config, const JwtIssuer* previous);

/// A JWKS document's keys, or why not (not a JWKS, or no key it could use, each one's reason).
std::variant<KeySet, std::string> read_jwks(std::string_view text);

/// The largest token looked at: larger ones are refused unread.
inline constexpr std::size_t k_max_jwt_bytes = 16 * 1024;
/// The largest JWKS read, from a file or a URL.
inline constexpr std::size_t k_max_jwks_bytes = 1024 * 1024;

}  // namespace tokengate::auth
