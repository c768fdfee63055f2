#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/core/calendar.hpp"
#include "tokengate/core/cidr.hpp"
#include "tokengate/core/clock.hpp"

namespace tokengate::config {

enum class Level { tenant, ip, route, global };
enum class Algorithm { token_bucket, leaky_bucket, concurrency, quota };
enum class LeakyMode { police, shape };
enum class Unit { requests, cost, tokens, usd };
enum class Rounding { floor, ceil };
enum class StoreBackend { memory, redis };
enum class OnStoreError { fail_open, fail_closed, local };
/// store.redis.mode (SPEC §18): one server, or a master the sentinels name.
enum class RedisMode { standalone, sentinel, cluster };

const char* to_string(Level level);
const char* to_string(Algorithm algorithm);
const char* to_string(Unit unit);

/// Matches `*` (any run) and `?` (one char), as in the config's model patterns.
bool glob_match(std::string_view pattern, std::string_view text);

/// SPEC §13: a rate that follows the model servers' load (AIMD, once per scrape interval).
enum class LoadSignal { queue, kv_cache, ttft };
const char* to_string(LoadSignal signal);

struct AdaptiveRate {
    LoadSignal signal = LoadSignal::queue;
    double target = 0;          // waiting requests, a 0–1 share of the KV cache, or seconds
    double min_rate_per_s = 0;  // never adapted below
    /// The rate in force, shared by every copy of the spec (a tier's limit in each tenant) and
    /// moved by the server's controller; the limiter reads it through current_rate().
    std::shared_ptr<std::atomic<double>> rate_per_s;
};

struct LimitSpec {
    std::string name;
    Algorithm algorithm = Algorithm::token_bucket;
    LeakyMode mode = LeakyMode::police;
    Unit unit = Unit::requests;
    double capacity = 0;       // token/leaky: bucket size; concurrency: `max`; quota: `limit`
    double rate_per_s = 0;     // token/leaky only
    double initial = 1.0;      // token bucket: fraction of capacity at creation
    core::Nanos max_wait = 0;  // leaky shape only
    bool enforce = true;
    bool fair = false;
    bool ranked = false;              // leaky shape: its tenants are of more than one priority class (SPEC §13)
    std::vector<std::string> models;  // glob patterns; empty = every model
    bool per_subject = false;         // `per: subject`: one bucket per end user of the tenant (SPEC §21)
    core::CalendarPeriod period = core::CalendarPeriod::day;  // quota only
    const date::time_zone* zone = nullptr;                    // quota only: quotas.timezone
    std::optional<AdaptiveRate> adaptive;                     // token/leaky only

    /// The refill rate now: the configured one, or where adaptation has moved it.
    double current_rate() const {
        return adaptive ? adaptive->rate_per_s->load(std::memory_order_relaxed) : rate_per_s;
    }
};

/// Where a key was written (1-based), for errors found after loading, such as a tokenizer
/// file that does not parse or a certificate that has expired: "source_path:line:column".
struct KeyPosition {
    int line = 1;
    int column = 1;
    bool operator==(const KeyPosition&) const = default;
};

/// A file named by the config, with where it was named (paths are absolute by then).
struct ConfigFile {
    std::string path;  // empty: not given
    KeyPosition at;
    bool operator==(const ConfigFile&) const = default;
};

/// TLS towards a server the gateway connects to: an https:// upstream, a rediss:// store
/// (SPEC §16). Verification is on unless insecure_skip_verify says otherwise.
struct ClientTlsConfig {
    ConfigFile ca_file;  // empty: the system's CA store
    bool insecure_skip_verify = false;
    ConfigFile client_cert;
    ConfigFile client_key;
    bool operator==(const ClientTlsConfig&) const = default;
};

/// The listener speaks HTTPS (SPEC §16); SIGHUP reloads the pair.
struct ServerTlsConfig {
    ConfigFile cert;
    ConfigFile key;
    int min_version = 12;                       // 12: TLS 1.2, 13: TLS 1.3
    std::vector<std::string> alpn{"http/1.1"};  // what the listener agrees to; only HTTP/1.1 is spoken
    std::string plain_host;                     // a plain-HTTP listener beside it (plain_port > 0)
    std::uint16_t plain_port = 0;
    bool plain = false;
    bool operator==(const ServerTlsConfig&) const = default;
};

struct ServerConfig {
    std::string host = "0.0.0.0";
    std::uint16_t port = 8080;
    unsigned threads = 0;  // 0 = one per core
    std::uint64_t max_body_bytes = 4ull << 20;
    std::uint32_t max_header_bytes = 16u << 10;
    std::uint64_t max_connections = 10000;
    core::Nanos header_timeout = 10 * core::k_nanos_per_second;
    core::Nanos idle_timeout = 75 * core::k_nanos_per_second;
    core::Nanos drain_timeout = 30 * core::k_nanos_per_second;
    std::vector<core::Cidr> trusted_proxies;
    std::optional<ServerTlsConfig> tls;
    /// SPEC §17: bodies larger than this are tokenized on the pricing pool, off the event loop.
    std::uint64_t pricing_offload_bytes = 64u << 10;
    unsigned pricing_threads = 1;
};

struct AdminConfig {
    bool enabled = true;
    std::string host = "127.0.0.1";
    std::uint16_t port = 9090;
    std::string token_env = "TOKENGATE_ADMIN_TOKEN";
};

/// Where and how often the model server's own Prometheus page is read (SPEC §13).
struct UpstreamMetrics {
    std::string path = "/metrics";
    core::Nanos interval = core::k_nanos_per_second;
    core::Nanos timeout = core::k_nanos_per_second;  // one scrape, connect to last byte
};

struct UpstreamConfig {
    std::string name;
    std::string url;
    std::string host;
    std::uint16_t port = 80;
    bool https = false;
    ClientTlsConfig tls;    // https only
    std::string base_path;  // prefix prepended to the client's target ("" or "/x")
    std::string api_key;    // resolved from api_key_env at load; empty = send no key
    std::uint64_t max_connections = 512;
    core::Nanos connect_timeout = 2 * core::k_nanos_per_second;
    core::Nanos first_byte_timeout = 120 * core::k_nanos_per_second;
    core::Nanos stream_idle_timeout = 60 * core::k_nanos_per_second;
    unsigned eject_consecutive_failures = 5;
    core::Nanos eject_for = 10 * core::k_nanos_per_second;
    std::optional<UpstreamMetrics> metrics;
};

struct WeightedUpstream {
    std::size_t upstream = 0;  // index into GatewayConfig::upstreams
    unsigned weight = 1;
};

enum class Balance { weighted, least_loaded, prefix_affinity };

/// `balance: prefix_affinity` (SPEC §22): the prompt's first `prefix_tokens` tokens pick an
/// upstream on a consistent-hash ring, passed over while its in-flight + queue is above
/// `max_load` × the route's average.
struct AffinityConfig {
    std::uint64_t prefix_tokens = 256;
    double max_load = 1.25;
};

/// `retry: { on: [429, 503], attempts: 1 }`: an upstream's refusal with one of these statuses,
/// before any byte of its body reached the client, is tried on another upstream of the route.
struct RetryConfig {
    std::vector<unsigned> on;
    unsigned attempts = 0;  // 0: no retry
};

struct RouteConfig {
    std::string path;
    bool prefix = false;
    Balance balance = Balance::weighted;
    AffinityConfig affinity;
    RetryConfig retry;
    std::vector<WeightedUpstream> upstreams;
    std::vector<std::string> models;
    std::vector<LimitSpec> limits;
};

/// How many tokens an image costs the model (SPEC §11).
struct ImageScheme {
    enum class Kind { tiles, patches };
    Kind kind = Kind::tiles;
    std::uint64_t tile = 512, per_tile = 170, base = 85;  // OpenAI's high-detail rule
    std::uint64_t patch = 28, max_pixels = 1003520;       // Qwen-VL style
};

/// US dollars per million tokens (SPEC §14); cached prompt tokens at their own price.
struct ModelPrice {
    double input = 0;
    double output = 0;
    double cached_input = 0;
};

struct ModelCost {
    std::string pattern;
    std::string tokenizer;  // a tokenizer.json or .tiktoken file; empty: cost.estimator counts
    KeyPosition tokenizer_at;
    std::uint64_t message_overhead = 4;  // tokens a chat template adds around each message
    double cost_factor = 1.0;
    std::optional<std::uint64_t> max_output_tokens;  // the output a request naming none reserves
    ImageScheme image_tokens;
    std::uint64_t image_default_tokens = 1000;  // an image behind a URL, or of unknown format
    std::uint64_t media_default_tokens = 1000;  // each audio, video or file part
    /// Completions' `prompt_embeds`: decoded bytes per token; 0 refuses them (SPEC §17).
    std::uint64_t embeds_bytes_per_token = 0;
    std::optional<ModelPrice> price;  // none: its requests cost 0 USD
};

/// SPEC §12: where the output reservation comes from.
enum class OutputEstimate { declared, learned };

/// `cost.learned`: the window of settlements kept per (tenant, model), and its quantile.
struct LearnedEstimate {
    std::uint32_t window = 200;
    double quantile = 0.95;
    std::uint32_t min_samples = 20;
    std::size_t max_series = 100'000;  // (tenant, model) series kept; the least recent go first
};

struct CostConfig {
    double input_per = 100;
    double input_min = 1;
    double output_per = 50;
    double output_min = 1;
    Rounding rounding = Rounding::floor;
    double stream_surcharge = 1;
    std::uint64_t default_max_tokens = 256;
    std::string tiktoken_path;     // empty = heuristic estimator; else a .tiktoken rank file
    std::string tiktoken_pattern;  // "cl100k" | "o200k" | "" (by vocabulary size)
    KeyPosition tiktoken_at;
    OutputEstimate output_estimate = OutputEstimate::declared;
    LearnedEstimate learned;
    bool cap_output = false;        // lower the output field instead of refusing (SPEC §12)
    std::uint64_t min_output = 16;  // the least output a capped request keeps
    bool stop_at_budget = false;    // end a stream that runs past the budget
    /// Tokens a stream relays between its live charges to the tenant's cost limits (SPEC §17).
    std::uint64_t stream_charge_every = 64;
    /// What a prompt token the upstream reports as cached (no prefill) costs, against an
    /// uncached one, at settlement (SPEC §20).
    double cached_input_factor = 1.0;
};

/// Who goes first when the GPUs are overloaded (SPEC §13).
enum class Priority { critical, standard, sheddable };

/// `overload:` every available upstream of a route past either: sheddable requests get a 503.
struct OverloadConfig {
    std::optional<double> queue;     // waiting requests at an upstream
    std::optional<double> kv_cache;  // its KV-cache share, 0–1
};

struct TierConfig {
    std::string name;
    Priority priority = Priority::standard;
    std::vector<LimitSpec> limits;
};

struct TenantConfig {
    std::string id;
    std::string tier;
    Priority priority = Priority::standard;  // the tier's
    std::vector<std::string> key_digests;    // raw 32-byte SHA-256 digests
    std::vector<LimitSpec> limits;           // effective: tier limits with overrides applied
};

struct RedisConfig {
    std::string url = "redis://127.0.0.1:6379/0";
    std::string prefix = "tg:";
    core::Nanos timeout = 50'000'000;
    unsigned pool = 8;
    OnStoreError on_error = OnStoreError::local;
    bool tls_enabled = false;  // a rediss:// URL
    ClientTlsConfig tls;
    RedisMode mode = RedisMode::standalone;
    /// sentinel: the sentinels; cluster: seed nodes (else the url's). "host:port" each; the url
    /// then gives only the scheme and the db.
    std::vector<std::string> nodes;
    std::string master;  // the name the sentinels monitor it by
    /// Settlements are sent in one call per worker this often (0: each at once).
    core::Nanos flush_interval = 5'000'000;
};

/// store.leases (SPEC §18): route, IP and global rate limits leased per replica from Redis.
struct LeaseConfig {
    double fraction = 0.05;                // of the capacity, taken at once (at least one request's worth)
    core::Nanos min_period = 200'000'000;  // a lease unused this long goes back
    bool operator==(const LeaseConfig&) const = default;
};

struct StoreConfig {
    StoreBackend backend = StoreBackend::memory;
    RedisConfig redis;
    std::optional<LeaseConfig> leases;  // none: every limit decided in Redis per request
    /// The memory store's bucket levels, kept across restarts (SPEC §14); empty: not kept.
    ConfigFile state_file;
    core::Nanos snapshot_interval = 10 * core::k_nanos_per_second;
};

struct LogConfig {
    std::string access = "stdout";  // stdout | off | a file path
    std::string level = "info";
    std::uint64_t rotate_max_bytes = 0;  // a file access log rotates at this size (0 = never)
    unsigned rotate_files = 5;
};

/// The whole validated configuration. Immutable once loaded: each request takes one snapshot.
/// `auth.jwt` (SPEC §21): Bearer values that are JWTs name their tenant in a claim.
struct JwtConfig {
    std::string issuer;                  // `iss` must equal it; empty: not checked
    std::vector<std::string> audiences;  // `aud` must hold one of them; empty: not checked
    ConfigFile jwks_file;                // the issuer's public keys (a JWKS), read at start and reload
    // Or fetched: GET jwks_url at start and every jwks_refresh (a failed fetch keeps the keys).
    std::string jwks_url;  // empty: jwks_file
    bool jwks_https = false;
    std::string jwks_host;
    unsigned short jwks_port = 0;
    std::string jwks_path;
    core::Nanos jwks_refresh = 300'000'000'000;
    std::vector<std::string> algorithms;  // accepted `alg`s: RS256/384/512, PS256, ES256/384, EdDSA
    std::string tenant_claim;             // the claim naming the tenant's id
    std::string tier_claim;               // optional: a tier for a tenant not in the config
    core::Nanos leeway = 30'000'000'000;  // clock skew allowed on exp and nbf
};

/// `auth.subject` (SPEC §21): who the end user is, inside a tenant, for `per: subject` limits.
struct SubjectConfig {
    std::string header;                   // a request header naming the end user; empty: none
    std::string body_field;               // a top-level string field of the body (`user`); empty: none
    std::size_t max_per_tenant = 10'000;  // subjects kept a tenant; the least recently seen go first
};

struct AuthConfig {
    std::optional<JwtConfig> jwt;
    SubjectConfig subject;
    ConfigFile keys_file;  // API keys made at run time (the admin key API); empty: that API is off
};

struct GatewayConfig {
    std::string source_path;
    ServerConfig server;
    AdminConfig admin;
    std::vector<UpstreamConfig> upstreams;
    std::vector<RouteConfig> routes;
    std::vector<ModelCost> models;
    CostConfig cost;
    std::vector<TierConfig> tiers;
    std::vector<TenantConfig> tenants;
    std::vector<LimitSpec> ip_limits;
    std::vector<LimitSpec> global_limits;
    StoreConfig store;
    LogConfig log;
    AuthConfig auth;
    std::string quota_timezone = "UTC";  // quotas.timezone: where a quota's day begins
    std::optional<OverloadConfig> overload;
    std::vector<std::string> warnings;  // "file:line:col: message", e.g. plain keys
};

}  // namespace tokengate::config
