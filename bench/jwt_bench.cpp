// SPEC §21: what verifying a JWT costs a request, per algorithm, with the JWKS's keys already
// parsed (the verifier is made once per config): a token's first request, which checks its
// signature, and its later ones, which find it accepted; and an API key's lookup beside them. Tokens and
// keys are the fuzz corpus's, signed by npm's jose (tests/sdk/jwt.mjs).
//   build/release/bench/jwt_bench

#include <benchmark/benchmark.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "tokengate/auth/jwt.hpp"
#include "tokengate/auth/key_table.hpp"
#include "tokengate/config/loader.hpp"

namespace {

using namespace tokengate;

std::string file(const std::string& path) {
    std::string where = TOKENGATE_SOURCE_DIR;  // appended, not a + chain: GCC 12 misreads that one's bounds
    where.append("/tests/fuzz/").append(path);
    std::ifstream in(where);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

const auth::KeySet& keys() {
    static const auto* k = [] {
        std::string error;
        return new auth::KeySet(*auth::KeySet::parse(file("jwks.json"), &error));
    }();
    return *k;
}

config::JwtConfig policy() {
    config::JwtConfig p;
    p.issuer = "https://idp.example.com/";
    p.audiences = {"tokengate"};
    p.algorithms = {"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"};
    p.tenant_claim = "org";
    return p;
}

/// A token's first request: the signature checked (a fresh verifier each time, made untimed).
void BM_VerifyJwtFirstTime(benchmark::State& state, const std::string& name) {
    auto token = file("corpus/jwt/" + name);
    for (auto _ : state) {
        state.PauseTiming();
        auto v = std::make_unique<auth::JwtVerifier>(policy(), keys());
        state.ResumeTiming();
        if (!std::holds_alternative<auth::JwtIdentity>(v->verify(token, 1e9))) state.SkipWithError("refused");
        state.PauseTiming();
        v.reset();
        state.ResumeTiming();
    }
}
BENCHMARK_CAPTURE(BM_VerifyJwtFirstTime, RS256, std::string("valid_RS256"));
BENCHMARK_CAPTURE(BM_VerifyJwtFirstTime, PS256, std::string("valid_PS256"));
BENCHMARK_CAPTURE(BM_VerifyJwtFirstTime, ES256, std::string("valid_ES256"));
BENCHMARK_CAPTURE(BM_VerifyJwtFirstTime, ES384, std::string("valid_ES384"));
BENCHMARK_CAPTURE(BM_VerifyJwtFirstTime, EdDSA, std::string("valid_EdDSA"));

/// Every later request with the same token: its digest found, its times checked.
void BM_VerifyJwtAgain(benchmark::State& state, const std::string& name) {
    auto token = file("corpus/jwt/" + name);
    auth::JwtVerifier v(policy(), keys());
    if (!std::holds_alternative<auth::JwtIdentity>(v.verify(token, 1e9))) state.SkipWithError("refused");
    for (auto _ : state) benchmark::DoNotOptimize(v.verify(token, 1e9));
}
BENCHMARK_CAPTURE(BM_VerifyJwtAgain, RS256, std::string("valid_RS256"));
BENCHMARK_CAPTURE(BM_VerifyJwtAgain, ES384, std::string("valid_ES384"));

void BM_RefuseForgedJwt(benchmark::State& state) {
    // A forgery costs what a signature check costs: refused after it, not before.
    auto token = file("corpus/jwt/valid_ES256");
    token.back() = token.back() == 'A' ? 'Q' : 'A';
    auth::JwtVerifier v(policy(), keys());
    for (auto _ : state) benchmark::DoNotOptimize(v.verify(token, 1e9));
}
BENCHMARK(BM_RefuseForgedJwt);

void BM_ApiKey(benchmark::State& state) {
    auto cfg = config::load_config_text(
        "upstreams: [ { name: u, url: \"http://127.0.0.1:1\" } ]\n"
        "routes: [ { path: /v1/chat/completions, upstreams: [u] } ]\n"
        "tenants: [ { id: t, keys: [\"sk-abcdefghijklmnopqrstuvwxyz012345\"] } ]\n",
        "bench.yaml");
    auth::KeyTable keys(*cfg);
    std::string key = "sk-abcdefghijklmnopqrstuvwxyz012345";
    for (auto _ : state) benchmark::DoNotOptimize(keys.authenticate(key));
}
BENCHMARK(BM_ApiKey);

}  // namespace

BENCHMARK_MAIN();
