#pragma once

#include <atomic>
#include <map>
#include <memory>

#include "tokengate/auth/jwt.hpp"
#include "tokengate/auth/key_table.hpp"
#include "tokengate/auth/made_tenants.hpp"
#include "tokengate/config/config.hpp"
#include "tokengate/cost/tokenizer.hpp"
#include "tokengate/proxy/balance.hpp"
#include "tokengate/proxy/pool.hpp"

namespace boost::asio::ssl {
class context;
}
namespace tokengate::tls {
class ClientContext;
}

namespace tokengate::server {

class RunTimeBook;

/// Everything derived from one config, swapped whole on reload. A request takes one
/// snapshot and uses it to the end, so a reload never changes a request mid-way.
struct Runtime {
    /// `book`: what the admin API makes, where the gateway keeps it (Redis); none: the
    /// previous Runtime's, else auth.keys_file's.
    explicit Runtime(std::shared_ptr<const config::GatewayConfig> config, const Runtime* previous = nullptr,
                     std::shared_ptr<RunTimeBook> book = nullptr);

    /// The tenant `id`: the config's, else one made at run time on its tier, else (a JWT's)
    /// one on `claimed_tier` if that names a tier (SPEC §21); nullptr if none of these.
    const config::TenantConfig* tenant(std::string_view id, std::string_view claimed_tier = {}) const;

    std::shared_ptr<const config::GatewayConfig> config;
    auth::KeyTable keys;
    /// `auth.jwt`'s issuer and the keys it has (SPEC §21); null without `auth.jwt`.
    std::shared_ptr<auth::JwtIssuer> jwt;
    /// API keys and tenants made at run time (SPEC §21), kept in auth.keys_file or Redis; null
    /// without either. Kept across reloads (a keys_file while it is the same file).
    std::shared_ptr<RunTimeBook> book;
    /// Run-time and JWT tenants on this config's tiers, built as they are first seen.
    mutable auth::MadeTenants made_tenants;
    /// Health per upstream (same index as config->upstreams); kept across reloads by name.
    std::vector<std::shared_ptr<proxy::UpstreamHealth>> health;
    /// Load per upstream from its /metrics (same index); kept across reloads by name.
    std::vector<std::shared_ptr<proxy::UpstreamLoad>> load;
    /// Per route (same index as config->routes): its consistent-hash ring under
    /// `balance: prefix_affinity`, else empty.
    std::vector<proxy::AffinityRing> rings;
    /// The estimator's and the models' tokenizers; a file unchanged by a reload is kept.
    cost::Tokenizers tokenizers;
    /// The listener's certificate (server.tls), loaded anew by every reload: new handshakes
    /// take the new pair, connections already open keep theirs.
    std::shared_ptr<boost::asio::ssl::context> server_tls;
    /// Per upstream (same index), for https ones: kept across reloads while the upstream's URL
    /// and tls settings are unchanged, so its pooled connections and TLS session survive.
    std::vector<std::shared_ptr<tls::ClientContext>> upstream_tls;
};

class RuntimeHolder {
public:
    explicit RuntimeHolder(std::shared_ptr<const Runtime> runtime) : current_(std::move(runtime)) {}
    std::shared_ptr<const Runtime> get() const { return current_.load(std::memory_order_acquire); }
    void set(std::shared_ptr<const Runtime> runtime) { current_.store(std::move(runtime), std::memory_order_release); }

private:
    std::atomic<std::shared_ptr<const Runtime>> current_;
};

}  // namespace tokengate::server
