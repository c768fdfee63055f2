#pragma once

// The config the server's unit tests share: one upstream that refuses connections (port 9),
// one route, one tenant "acme" with key "k1" on tier "t" whose limits the test gives.

#include <string>

namespace tokengate::server::testing {

inline std::string config_text(const std::string& tier_limits, const std::string& rest = "") {
    return "upstreams:\n  - { name: gpu, url: \"http://127.0.0.1:9\" }\n"
           "routes:\n  - { path: /v1/chat/completions, upstreams: [gpu] }\n"
           "tiers:\n  t:\n    limits:\n" +
           tier_limits + "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n" + rest;
}

}  // namespace tokengate::server::testing
