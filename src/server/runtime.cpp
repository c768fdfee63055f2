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
    const auto& c = config->cost;
    if (!c.tiktoken_path.empty()) {
        const auto& old = previous ? previous->config->cost : c;
        if (previous && previous->tokenizer && old.tiktoken_path == c.tiktoken_path &&
            old.tiktoken_pattern == c.tiktoken_pattern)
            tokenizer = previous->tokenizer;
        else if (c.tiktoken_pattern.empty()) tokenizer = cost::BpeTokenizer::load(c.tiktoken_path);
        else
            tokenizer = cost::BpeTokenizer::load(c.tiktoken_path, c.tiktoken_pattern == "o200k"
                                                                      ? cost::BpeTokenizer::Pattern::o200k
                                                                      : cost::BpeTokenizer::Pattern::cl100k);
    }
}

}  // namespace tokengate::server
