// The JWT verifier (SPEC §21) on any bytes as a Bearer value, against a JWKS of every accepted
// algorithm's key (jwks.json, made by tests/sdk/jwt.mjs; the corpus holds tokens it signed);
// and the JWKS parser on the same bytes.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string_view>

#include "tokengate/auth/jwt.hpp"

namespace {

const tokengate::auth::JwtVerifier& verifier() {
    static const auto* v = [] {
        std::ifstream in(TOKENGATE_FUZZ_JWKS);
        std::ostringstream text;
        text << in.rdbuf();
        std::string error;
        auto keys = tokengate::auth::KeySet::parse(text.str(), &error);
        if (!keys) std::abort();
        tokengate::config::JwtConfig policy;
        policy.issuer = "https://idp.example.com/";
        policy.audiences = {"tokengate"};
        policy.algorithms = {"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"};
        policy.tenant_claim = "org";
        policy.tier_claim = "plan";
        return new tokengate::auth::JwtVerifier(policy, std::move(*keys));
    }();
    return *v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    (void)tokengate::auth::looks_like_jwt(text);
    (void)verifier().verify(text, 1e9);
    std::string error;
    (void)tokengate::auth::KeySet::parse(text, &error);
    return 0;
}
