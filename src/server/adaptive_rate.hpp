#pragma once

// Internal to the server module: SPEC §13's adaptive rates. Once per scrape interval each
// adaptive limit's signal is read from the upstreams of the routes it applies to, and its rate
// moves by AIMD (× 0.7 over the target, + a tenth of the configured rate under 0.8 × target).

#include <atomic>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tokengate/config/config.hpp"
#include "tokengate/core/clock.hpp"

namespace tokengate::server {

struct Services;
struct Runtime;

class RateAdapter {
public:
    void tick(const Runtime& runtime, Services& services, core::Nanos now);

    struct Follower {
        const config::LimitSpec* spec = nullptr;
        std::vector<std::size_t> upstreams;  // the routes' upstreams that are scraped
        core::Nanos interval = 0;            // the shortest of their scrape intervals
    };

private:
    std::shared_ptr<const config::GatewayConfig> built_for_;  // followers_ point into it
    std::vector<Follower> followers_;
    std::unordered_map<const std::atomic<double>*, core::Nanos> next_;  // by the limit's shared rate
};

}  // namespace tokengate::server
