#include "tokengate/server/runtime.hpp"

namespace tokengate::server {

Runtime::Runtime(std::shared_ptr<const config::GatewayConfig> cfg, const Runtime* previous)
    : config(std::move(cfg)), keys(*config) {
    for (const auto& up : config->upstreams) {
        std::shared_ptr<proxy::UpstreamHealth> kept;
        if (previous)
            for (std::size_t i = 0; i < previous->config->upstreams.size(); ++i)
                if (previous->config->upstreams[i].name == up.name) kept = previous->health[i];
        health.push_back(kept ? kept : std::make_shared<proxy::UpstreamHealth>());
    }
    tokenizers = cost::Tokenizers::load(*config, previous ? &previous->tokenizers : nullptr);
}

}  // namespace tokengate::server
