#include "tokengate/server/runtime.hpp"

#include "run_time_keys.hpp"
#include "tokengate/config/loader.hpp"
#include "tokengate/tls/context.hpp"

namespace tokengate::server {

Runtime::Runtime(std::shared_ptr<const config::GatewayConfig> cfg, const Runtime* previous)
    : config(std::move(cfg)),
      keys(*config),
      jwt(auth::load_jwt_issuer(*config, previous ? previous->jwt.get() : nullptr)) {
    for (const auto& up : config->upstreams) {
        std::shared_ptr<proxy::UpstreamHealth> kept;
        std::shared_ptr<proxy::UpstreamLoad> kept_load;
        std::shared_ptr<tls::ClientContext> kept_tls;
        if (previous)
            for (std::size_t i = 0; i < previous->config->upstreams.size(); ++i) {
                const auto& was = previous->config->upstreams[i];
                if (was.name != up.name) continue;
                kept = previous->health[i];
                kept_load = previous->load[i];
                if (was.url == up.url && was.tls == up.tls) kept_tls = previous->upstream_tls[i];
            }
        health.push_back(kept ? kept : std::make_shared<proxy::UpstreamHealth>());
        load.push_back(kept_load ? kept_load : std::make_shared<proxy::UpstreamLoad>());
        if (up.https && !kept_tls) kept_tls = std::make_shared<tls::ClientContext>(up.tls, config->source_path);
        upstream_tls.push_back(up.https ? kept_tls : nullptr);
    }
    for (const auto& route : config->routes)
        rings.push_back(route.balance == config::Balance::prefix_affinity
                            ? proxy::AffinityRing(route, config->upstreams)
                            : proxy::AffinityRing());
    tokenizers = cost::Tokenizers::load(*config, previous ? &previous->tokenizers : nullptr);
    if (const auto& file = config->auth.keys_file; !file.path.empty()) {
        if (previous && previous->run_time_keys && previous->run_time_keys->file() == file.path) {
            run_time_keys = previous->run_time_keys;
        } else {
            try {
                run_time_keys = std::make_shared<RunTimeKeys>(file.path);
            } catch (const std::exception& e) {
                throw config::ConfigError(config->source_path, file.at.line, file.at.column, e.what());
            }
        }
    }
    if (config->server.tls) server_tls = tls::make_server_context(*config->server.tls, config->source_path);
}

}  // namespace tokengate::server
