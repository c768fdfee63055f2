#include "tokengate/server/runtime.hpp"

#include "run_time_book.hpp"
#include "tokengate/config/loader.hpp"
#include "tokengate/tls/context.hpp"

namespace tokengate::server {

namespace {

std::string file_keeper_name(const std::string& path) { return "auth.keys_file " + path; }

}  // namespace

Runtime::Runtime(std::shared_ptr<const config::GatewayConfig> cfg, const Runtime* previous,
                 std::shared_ptr<RunTimeBook> given_book)
    : config(std::move(cfg)),
      keys(*config),
      jwt(auth::load_jwt_issuer(*config, previous ? previous->jwt.get() : nullptr)),
      book(std::move(given_book)),
      made_tenants(*config) {
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
    const auto& file = config->auth.keys_file;
    bool shared = config->store.backend == config::StoreBackend::redis;  // the store changes only at restart
    bool keep_previous = previous && previous->book &&
                         (shared || (!file.path.empty() && previous->book->where() == file_keeper_name(file.path)));
    if (!book && keep_previous) {
        book = previous->book;
    } else if (!book && !file.path.empty()) {
        try {
            auto keeper = std::make_unique<FileKeeper>(file.path);
            auto contents = keeper->read();
            book = std::make_shared<RunTimeBook>(std::move(keeper), file_keeper_name(file.path), std::move(contents));
        } catch (const std::exception& e) {
            throw config::ConfigError(config->source_path, file.at.line, file.at.column, e.what());
        }
    }
    if (config->server.tls) server_tls = tls::make_server_context(*config->server.tls, config->source_path);
}

const config::TenantConfig* Runtime::tenant(std::string_view id, std::string_view claimed_tier) const {
    if (const auto* configured = keys.tenant(id)) return configured;
    if (book)
        if (auto tier = book->tier_of(id)) return made_tenants.get(id, *tier);
    return claimed_tier.empty() ? nullptr : made_tenants.get(id, claimed_tier);
}

}  // namespace tokengate::server
