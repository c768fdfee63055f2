#include "tokengate/config/loader.hpp"

#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "tokengate/config/units.hpp"
#include "tokengate/core/calendar.hpp"
#include "tokengate/core/sha256.hpp"

namespace tokengate::config {

ConfigError::ConfigError(std::string file, int line, int column, std::string message)
    : std::runtime_error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(std::move(message)) {}

namespace {

// The limiter's range (rate_bucket.hpp): 128-bit nanoseconds hold 2·C/R for all of it, and
// 1e15 units stay exact to an eighth of a unit in a double.
constexpr double k_max_capacity = 1e15;
constexpr double k_min_rate = 1e-9;  // one per 31 years
constexpr double k_max_rate = 1e12;

using Keys = std::initializer_list<std::string_view>;

/// Walks the YAML tree; every error throws ConfigError at the offending node's position.
class Reader {
public:
    explicit Reader(std::string file) : file_(std::move(file)) {}

    [[noreturn]] void fail(const YAML::Node& at, const std::string& message) const {
        auto mark = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
        if (mark.is_null()) throw ConfigError(file_, 1, 1, message);
        throw ConfigError(file_, mark.line + 1, mark.column + 1, message);
    }

    void warn(const YAML::Node& at, const std::string& message, GatewayConfig& config) const {
        auto mark = at.Mark();
        config.warnings.push_back(file_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) +
                                  ": " + message);
    }

    /// Rejects keys outside `allowed` and duplicated keys.
    void expect_map(const YAML::Node& node, std::string_view what, Keys allowed) const {
        if (!node.IsMap()) fail(node, std::string(what) + " must be a mapping");
        std::set<std::string> seen;
        for (const auto& kv : node) {
            auto key = kv.first.Scalar();
            if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
                fail(kv.first, "unknown key '" + key + "' in " + std::string(what));
            if (!seen.insert(key).second) fail(kv.first, "duplicate key '" + key + "'");
        }
    }

    void expect_sequence(const YAML::Node& node, std::string_view what) const {
        if (!node.IsSequence()) fail(node, std::string(what) + " must be a list");
    }

    std::string scalar(const YAML::Node& node, std::string_view what) const {
        if (!node.IsScalar()) fail(node, std::string(what) + " must be a scalar value");
        return node.Scalar();
    }

    std::string string_of(const YAML::Node& node, std::string_view what) const {
        auto s = scalar(node, what);
        if (s.empty()) fail(node, std::string(what) + " must not be empty");
        return s;
    }

    double number(const YAML::Node& node, std::string_view what) const {
        auto value = parse_quantity(scalar(node, what));
        if (!value) fail(node, std::string(what) + " must be a number, got '" + node.Scalar() + "'");
        return *value;
    }

    double positive(const YAML::Node& node, std::string_view what) const {
        if (node.IsScalar() && node.Scalar().rfind('-', 0) == 0)
            fail(node, std::string(what) + " must be greater than 0");
        double v = number(node, what);
        if (v <= 0) fail(node, std::string(what) + " must be greater than 0");
        return v;
    }

    /// Doubles hold every whole number up to 2^53 exactly; nothing configurable needs more.
    static constexpr std::uint64_t k_max_whole = std::uint64_t{1} << 53;

    std::uint64_t whole(const YAML::Node& node, std::string_view what, std::uint64_t min,
                        std::uint64_t max = k_max_whole) const {
        double v = number(node, what);
        // Range first: casting a double beyond the integer's range is undefined behaviour.
        if (!(v >= static_cast<double>(min) && v <= static_cast<double>(max)) || v != std::floor(v))
            fail(node, std::string(what) + " must be a whole number >= " + std::to_string(min) +
                           (max == k_max_whole ? std::string() : " and <= " + std::to_string(max)));
        return static_cast<std::uint64_t>(v);
    }

    bool boolean(const YAML::Node& node, std::string_view what) const {
        auto s = scalar(node, what);
        if (s == "true" || s == "yes" || s == "on") return true;
        if (s == "false" || s == "no" || s == "off") return false;
        fail(node, std::string(what) + " must be true or false, got '" + s + "'");
    }

    core::Nanos duration(const YAML::Node& node, std::string_view what) const {
        auto d = parse_duration(scalar(node, what));
        if (!d) fail(node, std::string(what) + ": invalid duration '" + node.Scalar() + "' (use e.g. 250ms, 10s, 5m)");
        if (*d <= 0) fail(node, std::string(what) + " must be greater than 0");
        return *d;
    }

    /// A duration where 0 means "not at all" (written `0` or `0ms`).
    core::Nanos duration_or_zero(const YAML::Node& node, std::string_view what) const {
        auto text = scalar(node, what);
        if (text == "0") return 0;
        auto d = parse_duration(text);
        if (!d || *d < 0)
            fail(node,
                 std::string(what) + ": invalid duration '" + node.Scalar() + "' (use e.g. 250ms, 10s, 5m, or 0)");
        return *d;
    }

    double rate(const YAML::Node& node, std::string_view what) const {
        auto r = parse_rate(scalar(node, what));
        if (!r)
            fail(node, std::string(what) + ": invalid rate '" + node.Scalar() + "' (use e.g. 10/s, 600/min, 1M/day)");
        if (*r <= 0) fail(node, std::string(what) + " must be greater than 0");
        return *r;
    }

    std::uint64_t size(const YAML::Node& node, std::string_view what) const {
        auto s = parse_size(scalar(node, what));
        if (!s) fail(node, std::string(what) + ": invalid size '" + node.Scalar() + "' (use e.g. 4MiB, 16KiB)");
        if (*s == 0) fail(node, std::string(what) + " must be greater than 0");
        return *s;
    }

    HostPort listen(const YAML::Node& node, std::string_view what) const {
        auto hp = parse_host_port(scalar(node, what));
        if (!hp) fail(node, std::string(what) + ": expected host:port, got '" + node.Scalar() + "'");
        return *hp;
    }

    std::vector<std::string> strings(const YAML::Node& node, std::string_view what) const {
        expect_sequence(node, what);
        std::vector<std::string> out;
        for (const auto& item : node) out.push_back(string_of(item, what));
        return out;
    }

    const std::string& file() const { return file_; }

private:
    std::string file_;
};

struct Loader {
    Reader r;
    GatewayConfig config;
    double min_cost_factor = 1.0;
    const date::time_zone* zone = core::find_time_zone("UTC");
    const RouteConfig* parsing_route = nullptr;  // while a route's own limits are read

    void load(const YAML::Node& root) {
        if (!root.IsDefined() || root.IsNull()) r.fail(root, "the configuration is empty");
        r.expect_map(root, "the configuration",
                     {"server", "admin", "upstreams", "routes", "models", "cost", "tiers", "tenants", "ip_limits",
                      "global_limits", "store", "log", "quotas", "overload", "auth"});
        if (root["server"]) server(root["server"]);
        if (root["admin"]) admin(root["admin"]);
        if (root["log"]) log(root["log"]);
        if (root["store"]) store(root["store"]);
        if (!root["upstreams"]) r.fail(root, "missing required key 'upstreams'");
        upstreams(root["upstreams"]);
        if (root["models"]) models(root["models"]);
        if (root["quotas"]) quotas(root["quotas"]);
        if (root["cost"]) cost(root["cost"]);
        if (!root["routes"]) r.fail(root, "missing required key 'routes'");
        routes(root["routes"]);
        if (root["tiers"]) tiers(root["tiers"]);
        if (!root["tenants"]) r.fail(root, "missing required key 'tenants'");
        tenants(root["tenants"]);
        if (root["ip_limits"]) config.ip_limits = limits(root["ip_limits"], "ip_limits");
        if (root["global_limits"]) config.global_limits = limits(root["global_limits"], "global_limits");
        // An end user is someone inside a tenant: only a tenant's (or tier's) limit is per subject.
        auto not_per_subject = [&](const YAML::Node& list, const std::vector<LimitSpec>& specs) {
            for (std::size_t i = 0; i < specs.size(); ++i)
                if (specs[i].per_subject) r.fail(list[i]["per"], "per: subject is for tier and tenant limits only");
        };
        if (root["ip_limits"]) not_per_subject(root["ip_limits"], config.ip_limits);
        if (root["global_limits"]) not_per_subject(root["global_limits"], config.global_limits);
        cluster_shared_limits(root);
        if (root["overload"]) overload(root["overload"]);
        if (root["auth"]) auth(root["auth"]);
        // SPEC §21: with the Redis store, what the admin API makes is kept in Redis, for every replica.
        if (root["auth"] && root["auth"]["keys_file"] && config.store.backend == StoreBackend::redis)
            r.fail(root["auth"]["keys_file"],
                   "auth.keys_file is for the memory store: with store.backend redis, keys and tenants made at run "
                   "time are kept in Redis");
        rank_shaping_queues();
    }

    /// A shaping queue serves priority classes in order only where there is more than one: a
    /// shared store then keeps it as a queue of places, not of start times handed out at once.
    void rank_shaping_queues() {
        std::set<Priority> classes;
        for (const auto& t : config.tenants) classes.insert(t.priority);
        if (classes.size() < 2) return;
        auto rank = [](std::vector<LimitSpec>& specs) {
            for (auto& l : specs) l.ranked = l.algorithm == Algorithm::leaky_bucket && l.mode == LeakyMode::shape;
        };
        for (auto& t : config.tenants) rank(t.limits);
        for (auto& route : config.routes) rank(route.limits);
        rank(config.ip_limits);
        rank(config.global_limits);
    }

    void overload(const YAML::Node& n) {
        r.expect_map(n, "overload", {"queue", "kv_cache"});
        OverloadConfig o;
        if (n["queue"]) o.queue = r.positive(n["queue"], "overload.queue");
        if (n["kv_cache"]) {
            o.kv_cache = r.positive(n["kv_cache"], "overload.kv_cache");
            if (*o.kv_cache > 1) r.fail(n["kv_cache"], "overload.kv_cache is a share of the KV cache, 0 to 1");
        }
        if (!o.queue && !o.kv_cache) r.fail(n, "overload needs 'queue' and/or 'kv_cache'");
        bool scraped = false;
        for (const auto& u : config.upstreams) scraped = scraped || u.metrics;
        if (!scraped) r.fail(n, "overload is judged from the upstreams' metrics, but no upstream has 'metrics'");
        config.overload = o;
    }

    void server(const YAML::Node& n) {
        r.expect_map(n, "server",
                     {"listen", "threads", "max_body_bytes", "max_header_bytes", "max_connections", "timeouts",
                      "drain_timeout", "trusted_proxies", "tls", "pricing"});
        auto& s = config.server;
        if (n["listen"]) {
            auto hp = r.listen(n["listen"], "server.listen");
            s.host = hp.host;
            s.port = hp.port;
        }
        if (n["threads"]) s.threads = static_cast<unsigned>(r.whole(n["threads"], "server.threads", 0, 1024));
        if (n["max_body_bytes"]) s.max_body_bytes = r.size(n["max_body_bytes"], "server.max_body_bytes");
        if (n["max_header_bytes"]) {
            auto v = r.size(n["max_header_bytes"], "server.max_header_bytes");
            if (v > (64u << 20)) r.fail(n["max_header_bytes"], "server.max_header_bytes is too large");
            s.max_header_bytes = static_cast<std::uint32_t>(v);
        }
        if (n["max_connections"]) s.max_connections = r.whole(n["max_connections"], "server.max_connections", 1);
        if (const auto& t = n["timeouts"]) {
            r.expect_map(t, "server.timeouts", {"header", "idle"});
            if (t["header"]) s.header_timeout = r.duration(t["header"], "server.timeouts.header");
            if (t["idle"]) s.idle_timeout = r.duration(t["idle"], "server.timeouts.idle");
        }
        if (n["drain_timeout"]) s.drain_timeout = r.duration(n["drain_timeout"], "server.drain_timeout");
        if (const auto& p = n["pricing"]) {
            r.expect_map(p, "server.pricing", {"offload_bytes", "threads"});
            if (p["offload_bytes"])
                s.pricing_offload_bytes = r.size(p["offload_bytes"], "server.pricing.offload_bytes");
            if (p["threads"])
                s.pricing_threads = static_cast<unsigned>(r.whole(p["threads"], "server.pricing.threads", 1, 64));
        }
        if (const auto& tp = n["trusted_proxies"]) {
            r.expect_sequence(tp, "server.trusted_proxies");
            for (const auto& item : tp) {
                auto cidr = core::Cidr::parse(r.scalar(item, "server.trusted_proxies"));
                if (!cidr) r.fail(item, "invalid address or CIDR '" + item.Scalar() + "'");
                s.trusted_proxies.push_back(*cidr);
            }
        }
        if (n["tls"]) s.tls = server_tls(n["tls"]);
    }

    ServerTlsConfig server_tls(const YAML::Node& n) {
        r.expect_map(n, "server.tls", {"cert", "key", "min_version", "alpn", "plain_listen"});
        ServerTlsConfig t;
        if (!n["cert"] || !n["key"]) r.fail(n, "server.tls needs both 'cert' and 'key'");
        t.cert = config_file(n["cert"], "server.tls.cert", "certificate");
        t.key = config_file(n["key"], "server.tls.key", "key");
        if (n["min_version"]) {
            auto v = r.scalar(n["min_version"], "server.tls.min_version");
            if (v == "1.2") t.min_version = 12;
            else if (v == "1.3") t.min_version = 13;
            else r.fail(n["min_version"], "server.tls.min_version must be \"1.2\" or \"1.3\", got '" + v + "'");
        }
        if (n["alpn"]) {
            t.alpn = r.strings(n["alpn"], "server.tls.alpn");
            for (const auto& p : t.alpn)
                if (p != "http/1.1")
                    r.fail(n["alpn"], "server.tls.alpn: the gateway speaks only http/1.1, not '" + p + "'");
        }
        if (n["plain_listen"]) {
            auto hp = r.listen(n["plain_listen"], "server.tls.plain_listen");
            t.plain = true;
            t.plain_host = hp.host;
            t.plain_port = hp.port;
        }
        return t;
    }

    ClientTlsConfig client_tls(const YAML::Node& n, const std::string& what) {
        r.expect_map(n, what, {"ca_file", "insecure_skip_verify", "client_cert", "client_key"});
        ClientTlsConfig t;
        if (n["ca_file"]) t.ca_file = config_file(n["ca_file"], what + ".ca_file", "CA");
        if (n["insecure_skip_verify"])
            t.insecure_skip_verify = r.boolean(n["insecure_skip_verify"], what + ".insecure_skip_verify");
        if (n["client_cert"].IsDefined() != n["client_key"].IsDefined())
            r.fail(n, what + ": client_cert and client_key go together");
        if (n["client_cert"]) t.client_cert = config_file(n["client_cert"], what + ".client_cert", "certificate");
        if (n["client_key"]) t.client_key = config_file(n["client_key"], what + ".client_key", "key");
        if (t.insecure_skip_verify && !t.ca_file.path.empty())
            r.fail(n["insecure_skip_verify"], what + ": insecure_skip_verify and ca_file contradict each other");
        if (t.insecure_skip_verify)
            r.warn(n["insecure_skip_verify"],
                   what + ": certificates are not verified; anyone on the path can read and change this traffic",
                   config);
        return t;
    }

    void admin(const YAML::Node& n) {
        r.expect_map(n, "admin", {"listen", "token_env", "enabled"});
        if (n["enabled"]) config.admin.enabled = r.boolean(n["enabled"], "admin.enabled");
        if (n["listen"]) {
            auto hp = r.listen(n["listen"], "admin.listen");
            config.admin.host = hp.host;
            config.admin.port = hp.port;
        }
        if (n["token_env"]) config.admin.token_env = r.string_of(n["token_env"], "admin.token_env");
    }

    void log(const YAML::Node& n) {
        r.expect_map(n, "log", {"access", "level", "format", "rotate"});
        if (const auto& rot = n["rotate"]) {
            r.expect_map(rot, "log.rotate", {"max_size", "max_files"});
            if (rot["max_size"]) config.log.rotate_max_bytes = r.size(rot["max_size"], "log.rotate.max_size");
            if (rot["max_files"])
                config.log.rotate_files =
                    static_cast<unsigned>(r.whole(rot["max_files"], "log.rotate.max_files", 1, 10000));
        }
        if (n["access"]) config.log.access = r.string_of(n["access"], "log.access");
        if (n["level"]) {
            auto level = r.string_of(n["level"], "log.level");
            static const std::set<std::string> k_levels = {"trace", "debug",    "info", "warn",
                                                           "error", "critical", "off"};
            if (!k_levels.count(level)) r.fail(n["level"], "log.level: unknown level '" + level + "'");
            config.log.level = level;
        }
        if (n["format"] && r.string_of(n["format"], "log.format") != "json")
            r.fail(n["format"], "log.format: only 'json' is supported");
    }

    void store(const YAML::Node& n) {
        r.expect_map(n, "store", {"backend", "redis", "state_file", "snapshot_interval", "leases"});
        if (n["backend"]) {
            auto b = r.string_of(n["backend"], "store.backend");
            if (b == "memory") config.store.backend = StoreBackend::memory;
            else if (b == "redis") config.store.backend = StoreBackend::redis;
            else r.fail(n["backend"], "store.backend must be memory or redis, got '" + b + "'");
        }
        if (n["state_file"]) {
            if (config.store.backend != StoreBackend::memory)
                r.fail(n["state_file"],
                       "store.state_file keeps the memory store's levels; with redis they live in Redis");
            auto& f = config.store.state_file;
            f.path = relative_to_config(r.string_of(n["state_file"], "store.state_file"));
            if (f.path.empty()) r.fail(n["state_file"], "store.state_file must name a file");
            auto dir = std::filesystem::path(f.path).parent_path().string();
            if (dir.empty()) dir = ".";
            if (::access(dir.c_str(), W_OK) != 0)
                r.fail(n["state_file"], "store.state_file: the directory " + dir + " is not writable");
            f.at = {n["state_file"].Mark().line + 1, n["state_file"].Mark().column + 1};
        }
        if (n["snapshot_interval"])
            config.store.snapshot_interval = r.duration(n["snapshot_interval"], "store.snapshot_interval");
        if (const auto& l = n["leases"]) {
            if (config.store.backend != StoreBackend::redis)
                r.fail(l,
                       "store.leases shares route, IP and global limits through Redis: it needs store.backend redis");
            r.expect_map(l, "store.leases", {"fraction", "min_period"});
            auto& leases = config.store.leases.emplace();
            if (l["fraction"]) {
                leases.fraction = r.number(l["fraction"], "store.leases.fraction");
                if (!(leases.fraction > 0 && leases.fraction <= 0.5))
                    r.fail(l["fraction"], "store.leases.fraction must be above 0 and at most 0.5");
            }
            if (l["min_period"]) leases.min_period = r.duration(l["min_period"], "store.leases.min_period");
        }
        if (const auto& rd = n["redis"]) {
            r.expect_map(
                rd, "store.redis",
                {"url", "prefix", "timeout", "pool", "on_error", "tls", "mode", "nodes", "master", "flush_interval"});
            auto& c = config.store.redis;
            if (rd["url"]) {
                c.url = r.string_of(rd["url"], "store.redis.url");
                c.tls_enabled = c.url.rfind("rediss://", 0) == 0;
                if (c.url.rfind("redis://", 0) != 0 && !c.tls_enabled)
                    r.fail(rd["url"], "store.redis.url must start with redis:// or rediss:// (TLS)");
                if (c.url.find('@') != std::string::npos)
                    r.fail(rd["url"], "store.redis.url must not carry credentials; set TOKENGATE_REDIS_PASSWORD");
            }
            if (rd["prefix"]) c.prefix = r.scalar(rd["prefix"], "store.redis.prefix");
            if (rd["timeout"]) c.timeout = r.duration(rd["timeout"], "store.redis.timeout");
            if (rd["flush_interval"]) {
                c.flush_interval = r.duration_or_zero(rd["flush_interval"], "store.redis.flush_interval");
                if (c.flush_interval > core::k_nanos_per_second)
                    r.fail(rd["flush_interval"], "store.redis.flush_interval must be at most 1s");
            }
            if (rd["pool"]) c.pool = static_cast<unsigned>(r.whole(rd["pool"], "store.redis.pool", 1, 1024));
            if (rd["on_error"]) {
                auto e = r.string_of(rd["on_error"], "store.redis.on_error");
                if (e == "fail_open") c.on_error = OnStoreError::fail_open;
                else if (e == "fail_closed") c.on_error = OnStoreError::fail_closed;
                else if (e == "local") c.on_error = OnStoreError::local;
                else r.fail(rd["on_error"], "store.redis.on_error must be fail_open, fail_closed or local");
            }
            if (rd["tls"]) {
                if (!c.tls_enabled) r.fail(rd["tls"], "store.redis.tls applies to a rediss:// url");
                c.tls = client_tls(rd["tls"], "store.redis.tls");
            }
            redis_topology(rd, c);
        }
    }

    /// SPEC §18: where the Redis server is, when it is not the url's host.
    void redis_topology(const YAML::Node& rd, RedisConfig& c) {
        if (rd["mode"]) {
            auto m = r.string_of(rd["mode"], "store.redis.mode");
            if (m == "standalone") c.mode = RedisMode::standalone;
            else if (m == "sentinel") c.mode = RedisMode::sentinel;
            else if (m == "cluster") c.mode = RedisMode::cluster;
            else r.fail(rd["mode"], "store.redis.mode must be standalone, cluster or sentinel, got '" + m + "'");
        }
        if (rd["nodes"]) {
            r.expect_sequence(rd["nodes"], "store.redis.nodes");
            for (const auto& node : rd["nodes"]) {
                auto text = r.string_of(node, "store.redis.nodes[]");
                auto colon = text.rfind(':');
                unsigned port = 0;
                auto digits =
                    colon == std::string::npos ? std::string_view() : std::string_view(text).substr(colon + 1);
                auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
                if (colon == 0 || digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() ||
                    port == 0 || port > 65535)
                    r.fail(node, "store.redis.nodes: '" + text + "' is not host:port");
                c.nodes.push_back(text);
            }
        }
        if (rd["master"]) c.master = r.string_of(rd["master"], "store.redis.master");
        if (c.mode == RedisMode::sentinel) {
            if (c.nodes.empty()) r.fail(rd, "store.redis.mode sentinel needs store.redis.nodes: the sentinels");
            if (c.master.empty())
                r.fail(rd, "store.redis.mode sentinel needs store.redis.master: the name they monitor");
        } else if (c.mode == RedisMode::cluster) {
            if (rd["master"]) r.fail(rd["master"], "store.redis.master is for mode sentinel");
            // A cluster has db 0 only; a brace in the prefix would move every key's hash tag.
            auto path = c.url.find('/', c.url.find("://") + 3);
            auto db = path == std::string::npos ? std::string() : c.url.substr(path + 1);
            if (!db.empty() && db != "0") r.fail(rd["url"], "store.redis.mode cluster has db 0 only");
            if (c.prefix.find_first_of("{}") != std::string::npos)
                r.fail(rd["prefix"], "store.redis.prefix must not hold '{' or '}' in mode cluster (hash tags)");
        } else {
            if (rd["nodes"]) r.fail(rd["nodes"], "store.redis.nodes is for modes cluster and sentinel");
            if (rd["master"]) r.fail(rd["master"], "store.redis.master is for mode sentinel");
        }
    }

    /// SPEC §18: in mode cluster a tenant's decision is one script call on its own shard, so a
    /// limit shared by many tenants cannot be in it: route, IP and global rate limits are
    /// leased; any other kind has no shard to be decided on.
    void cluster_shared_limits(const YAML::Node& root) {
        if (config.store.backend != StoreBackend::redis || config.store.redis.mode != RedisMode::cluster) return;
        auto check = [&](const YAML::Node& list, const std::vector<LimitSpec>& specs, std::string_view where) {
            for (std::size_t i = 0; i < specs.size(); ++i) {
                const auto& l = specs[i];
                bool rate = l.algorithm == Algorithm::token_bucket ||
                            (l.algorithm == Algorithm::leaky_bucket && l.mode == LeakyMode::police);
                auto what = std::string(where) + " limit '" + l.name + "'";
                if (!rate)
                    r.fail(list[i], what +
                                        ": store.redis.mode cluster decides route, IP and global limits by "
                                        "leases, which take token_bucket and leaky_bucket police limits only");
                if (!config.store.leases)
                    r.fail(list[i], what +
                                        ": store.redis.mode cluster needs store.leases for route, IP and "
                                        "global limits (a tenant's decision is one call on its own shard)");
            }
        };
        if (root["routes"])
            for (std::size_t i = 0; i < config.routes.size(); ++i)
                if (!config.routes[i].limits.empty())
                    check(root["routes"][i]["limits"], config.routes[i].limits, "route");
        if (root["ip_limits"]) check(root["ip_limits"], config.ip_limits, "ip_limits");
        if (root["global_limits"]) check(root["global_limits"], config.global_limits, "global_limits");
    }

    void upstreams(const YAML::Node& n) {
        r.expect_sequence(n, "upstreams");
        if (n.size() == 0) r.fail(n, "upstreams must list at least one upstream");
        for (const auto& u : n) {
            r.expect_map(u, "upstream",
                         {"name", "url", "api_key_env", "max_connections", "timeouts", "eject", "tls", "metrics"});
            UpstreamConfig up;
            if (!u["name"]) r.fail(u, "upstream is missing 'name'");
            up.name = r.string_of(u["name"], "upstream name");
            for (const auto& other : config.upstreams)
                if (other.name == up.name) r.fail(u["name"], "duplicate upstream name '" + up.name + "'");
            if (!u["url"]) r.fail(u, "upstream '" + up.name + "' is missing 'url'");
            parse_url(u["url"], up);
            if (u["tls"]) {
                if (!up.https) r.fail(u["tls"], "upstream '" + up.name + "': tls applies to an https:// url");
                up.tls = client_tls(u["tls"], "upstream '" + up.name + "' tls");
            }
            if (u["api_key_env"]) {
                auto env = r.string_of(u["api_key_env"], "api_key_env");
                if (const char* v = std::getenv(env.c_str()); v && *v) up.api_key = v;
                else
                    r.warn(u["api_key_env"],
                           "environment variable " + env + " is not set; no key is sent to upstream '" + up.name + "'",
                           config);
            }
            if (u["max_connections"]) up.max_connections = r.whole(u["max_connections"], "max_connections", 1);
            if (const auto& t = u["timeouts"]) {
                r.expect_map(t, "upstream timeouts", {"connect", "first_byte", "stream_idle"});
                if (t["connect"]) up.connect_timeout = r.duration(t["connect"], "timeouts.connect");
                if (t["first_byte"]) up.first_byte_timeout = r.duration(t["first_byte"], "timeouts.first_byte");
                if (t["stream_idle"]) up.stream_idle_timeout = r.duration(t["stream_idle"], "timeouts.stream_idle");
            }
            if (const auto& e = u["eject"]) {
                r.expect_map(e, "eject", {"consecutive_failures", "for"});
                if (e["consecutive_failures"])
                    up.eject_consecutive_failures = static_cast<unsigned>(
                        r.whole(e["consecutive_failures"], "eject.consecutive_failures", 1, 1000000));
                if (e["for"]) up.eject_for = r.duration(e["for"], "eject.for");
            }
            if (u["metrics"]) up.metrics = upstream_metrics(u["metrics"]);
            config.upstreams.push_back(std::move(up));
        }
    }

    UpstreamMetrics upstream_metrics(const YAML::Node& n) {
        UpstreamMetrics m;  // `metrics: {}` takes every default
        r.expect_map(n, "metrics", {"path", "interval", "timeout"});
        if (n["path"]) {
            m.path = r.string_of(n["path"], "metrics.path");
            if (m.path.empty() || m.path.front() != '/' || m.path.size() > 1024 ||
                m.path.find_first_of(" \r\n\t") != std::string::npos)
                r.fail(n["path"], "metrics.path must be an absolute path such as /metrics");
        }
        auto bounded = [&](const char* key, core::Nanos& out) {
            if (!n[key]) return;
            out = r.duration(n[key], std::string("metrics.") + key);
            if (out < core::k_nanos_per_second / 10 || out > 3600 * core::k_nanos_per_second)
                r.fail(n[key], std::string("metrics.") + key + " must be between 100ms and 1h");
        };
        bounded("interval", m.interval);
        m.timeout = std::min(m.interval, core::k_nanos_per_second);  // a scrape never overlaps the next
        bounded("timeout", m.timeout);
        if (m.timeout > m.interval) r.fail(n["timeout"], "metrics.timeout must not exceed metrics.interval");
        return m;
    }

    void parse_url(const YAML::Node& node, UpstreamConfig& up) {
        up.url = r.string_of(node, "url");
        std::string_view rest = up.url;
        up.https = rest.rfind("https://", 0) == 0;
        if (!up.https && rest.rfind("http://", 0) != 0) r.fail(node, "a url must start with http:// or https://");
        rest.remove_prefix(up.https ? 8 : 7);
        auto slash = rest.find('/');
        auto authority = rest.substr(0, slash);
        up.base_path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
        while (!up.base_path.empty() && up.base_path.back() == '/') up.base_path.pop_back();
        if (authority.find(':') == std::string_view::npos || authority.back() == ']') {
            up.host = std::string(authority);
            up.port = up.https ? 443 : 80;
        } else {
            auto hp = parse_host_port(authority);
            if (!hp || hp->port == 0) r.fail(node, "invalid url '" + up.url + "'");
            up.host = hp->host;
            up.port = hp->port;
        }
        if (up.host.size() > 1 && up.host.front() == '[') up.host = up.host.substr(1, up.host.size() - 2);
        if (up.host.empty()) r.fail(node, "invalid url '" + up.url + "'");
    }

    void models(const YAML::Node& n) {
        if (!n.IsMap()) r.fail(n, "models must be a mapping of model name to settings");
        bool has_default = false;
        min_cost_factor = std::numeric_limits<double>::max();
        for (const auto& kv : n) {
            r.expect_map(kv.second, "model",
                         {"cost_factor", "max_output_tokens", "image_tokens", "image_default_tokens",
                          "media_default_tokens", "tokenizer", "message_overhead", "price", "embeds_bytes_per_token"});
            ModelCost m;
            m.pattern = r.string_of(kv.first, "model name");
            const auto& v = kv.second;
            if (v["tokenizer"]) m.tokenizer = readable_file(v["tokenizer"], "tokenizer", "tokenizer", m.tokenizer_at);
            if (v["message_overhead"]) m.message_overhead = r.whole(v["message_overhead"], "message_overhead", 0, 1000);
            if (v["cost_factor"]) m.cost_factor = r.positive(v["cost_factor"], "cost_factor");
            if (v["price"]) m.price = price(v["price"]);
            if (v["max_output_tokens"]) m.max_output_tokens = r.whole(v["max_output_tokens"], "max_output_tokens", 1);
            if (v["image_tokens"]) m.image_tokens = image_scheme(v["image_tokens"]);
            if (v["image_default_tokens"])
                m.image_default_tokens = r.whole(v["image_default_tokens"], "image_default_tokens", 0, 1'000'000);
            if (v["media_default_tokens"])
                m.media_default_tokens = r.whole(v["media_default_tokens"], "media_default_tokens", 0, 1'000'000);
            if (v["embeds_bytes_per_token"])
                m.embeds_bytes_per_token =
                    r.whole(v["embeds_bytes_per_token"], "embeds_bytes_per_token", 1, 1'000'000'000);
            has_default |= m.pattern == "*";
            min_cost_factor = std::min(min_cost_factor, m.cost_factor);
            config.models.push_back(m);
        }
        if (!has_default) min_cost_factor = std::min(min_cost_factor, 1.0);
    }

    /// A file named by the config: relative to the config file, not the cwd; it must be
    /// readable now (its contents are checked by whoever loads it, at `at`).
    std::string relative_to_config(std::string path) const {
        if (!path.empty() && path.front() != '/') {
            auto slash = r.file().rfind('/');
            if (slash != std::string::npos) path = r.file().substr(0, slash + 1) + path;
        }
        return path;
    }

    std::string readable_file(const YAML::Node& n, std::string_view what, std::string_view kind, KeyPosition& at) {
        auto path = relative_to_config(r.string_of(n, what));
        if (path.empty()) r.fail(n, std::string(what) + " must name a file");
        if (!std::ifstream(path)) r.fail(n, "cannot read " + std::string(kind) + " file " + path);
        at = {n.Mark().line + 1, n.Mark().column + 1};
        return path;
    }

    ConfigFile config_file(const YAML::Node& n, const std::string& what, std::string_view kind) {
        ConfigFile f;
        f.path = readable_file(n, what, kind, f.at);
        return f;
    }

    /// `{ tile, per_tile, base }` or `{ patch, max_pixels }`.
    ImageScheme image_scheme(const YAML::Node& n) {
        r.expect_map(n, "image_tokens", {"tile", "per_tile", "base", "patch", "max_pixels"});
        ImageScheme s;
        bool tiles = n["tile"] || n["per_tile"] || n["base"];
        bool patches = n["patch"] || n["max_pixels"];
        if (tiles == patches) r.fail(n, "image_tokens: give either { tile, per_tile, base } or { patch, max_pixels }");
        if (patches) {
            s.kind = ImageScheme::Kind::patches;
            if (n["patch"]) s.patch = r.whole(n["patch"], "image_tokens.patch", 1, 4096);
            if (n["max_pixels"]) s.max_pixels = r.whole(n["max_pixels"], "image_tokens.max_pixels", 1, 1ull << 32);
            return s;
        }
        if (n["tile"]) s.tile = r.whole(n["tile"], "image_tokens.tile", 1, 4096);
        if (n["per_tile"]) s.per_tile = r.whole(n["per_tile"], "image_tokens.per_tile", 0, 100'000);
        if (n["base"]) s.base = r.whole(n["base"], "image_tokens.base", 0, 100'000);
        return s;
    }

    void cost(const YAML::Node& n) {
        r.expect_map(
            n, "cost",
            {"input", "output", "rounding", "stream_surcharge", "default_max_tokens", "estimator", "output_estimate",
             "learned", "cap_output", "min_output", "stop_at_budget", "stream_charge_every", "cached_input_factor"});
        auto& c = config.cost;
        auto per_min = [&](const YAML::Node& b, std::string_view what, double& per, double& min) {
            r.expect_map(b, what, {"per", "min"});
            if (b["per"]) per = r.positive(b["per"], std::string(what) + ".per");
            if (b["min"]) {
                min = r.number(b["min"], std::string(what) + ".min");
                if (min < 0) r.fail(b["min"], std::string(what) + ".min must not be negative");
            }
        };
        if (n["input"]) per_min(n["input"], "cost.input", c.input_per, c.input_min);
        if (n["output"]) per_min(n["output"], "cost.output", c.output_per, c.output_min);
        if (n["rounding"]) {
            auto s = r.string_of(n["rounding"], "cost.rounding");
            if (s == "floor") c.rounding = Rounding::floor;
            else if (s == "ceil") c.rounding = Rounding::ceil;
            else r.fail(n["rounding"], "cost.rounding must be floor or ceil");
        }
        if (n["stream_surcharge"]) {
            c.stream_surcharge = r.number(n["stream_surcharge"], "cost.stream_surcharge");
            if (c.stream_surcharge < 0) r.fail(n["stream_surcharge"], "cost.stream_surcharge must not be negative");
        }
        if (n["default_max_tokens"])
            c.default_max_tokens = r.whole(n["default_max_tokens"], "cost.default_max_tokens", 1);
        if (const auto& e = n["estimator"]) {
            if (e.IsScalar()) {
                if (e.Scalar() != "heuristic") r.fail(e, "cost.estimator must be heuristic or { tiktoken: path }");
            } else {
                r.expect_map(e, "cost.estimator", {"tiktoken", "pattern"});
                if (!e["tiktoken"]) r.fail(e, "cost.estimator needs 'tiktoken: <path to a .tiktoken file>'");
                c.tiktoken_path = readable_file(e["tiktoken"], "cost.estimator.tiktoken", "tiktoken", c.tiktoken_at);
                if (e["pattern"]) {
                    c.tiktoken_pattern = r.string_of(e["pattern"], "cost.estimator.pattern");
                    if (c.tiktoken_pattern != "cl100k" && c.tiktoken_pattern != "o200k")
                        r.fail(e["pattern"], "cost.estimator.pattern must be cl100k or o200k");
                }
            }
        }
        if (n["output_estimate"]) {
            auto s = r.string_of(n["output_estimate"], "cost.output_estimate");
            if (s == "declared") c.output_estimate = OutputEstimate::declared;
            else if (s == "learned") c.output_estimate = OutputEstimate::learned;
            else r.fail(n["output_estimate"], "cost.output_estimate must be declared or learned");
        }
        if (const auto& l = n["learned"]) {
            r.expect_map(l, "cost.learned", {"window", "quantile", "min_samples", "max_series"});
            auto& learned = c.learned;
            if (l["window"])
                learned.window = static_cast<std::uint32_t>(r.whole(l["window"], "cost.learned.window", 1, 10'000));
            if (l["quantile"]) {
                learned.quantile = r.number(l["quantile"], "cost.learned.quantile");
                if (!(learned.quantile > 0 && learned.quantile <= 1))
                    r.fail(l["quantile"], "cost.learned.quantile must be above 0 and at most 1");
            }
            if (l["min_samples"])
                learned.min_samples =
                    static_cast<std::uint32_t>(r.whole(l["min_samples"], "cost.learned.min_samples", 1, 10'000));
            if (learned.min_samples > learned.window)
                r.fail(l["min_samples"] ? l["min_samples"] : l, "cost.learned.min_samples must not exceed its window");
            if (l["max_series"])
                learned.max_series = r.whole(l["max_series"], "cost.learned.max_series", 1, 100'000'000);
        }
        if (n["cap_output"]) c.cap_output = r.boolean(n["cap_output"], "cost.cap_output");
        if (n["min_output"]) c.min_output = r.whole(n["min_output"], "cost.min_output", 1, 1'000'000);
        if (n["stop_at_budget"]) c.stop_at_budget = r.boolean(n["stop_at_budget"], "cost.stop_at_budget");
        if (n["stream_charge_every"])
            c.stream_charge_every = r.whole(n["stream_charge_every"], "cost.stream_charge_every", 1, 1'000'000);
        if (n["cached_input_factor"]) {
            c.cached_input_factor = r.number(n["cached_input_factor"], "cost.cached_input_factor");
            if (!(c.cached_input_factor >= 0 && c.cached_input_factor <= 1))
                r.fail(n["cached_input_factor"], "cost.cached_input_factor must be from 0 to 1");
        }
        if (c.input_min + c.output_min <= 0) r.fail(n, "cost: input.min + output.min must be greater than 0");
    }

    double min_request_cost() const { return (config.cost.input_min + config.cost.output_min) * min_cost_factor; }

    LimitSpec limit(const YAML::Node& n) {
        r.expect_map(n, "limit",
                     {"name", "algorithm", "capacity", "rate", "unit", "initial", "mode", "max_wait", "max", "enforce",
                      "fair", "models", "period", "limit", "adaptive", "per"});
        LimitSpec l;
        if (!n["name"]) r.fail(n, "limit is missing 'name'");
        l.name = r.string_of(n["name"], "limit name");
        if (n["per"]) {
            auto per = r.string_of(n["per"], "per");
            if (per != "tenant" && per != "subject")
                r.fail(n["per"], "per must be tenant or subject, got '" + per + "'");
            l.per_subject = per == "subject";
        }
        if (!n["algorithm"]) r.fail(n, "limit '" + l.name + "' is missing 'algorithm'");
        auto algo = r.string_of(n["algorithm"], "algorithm");
        if (algo == "token_bucket") l.algorithm = Algorithm::token_bucket;
        else if (algo == "leaky_bucket") l.algorithm = Algorithm::leaky_bucket;
        else if (algo == "concurrency") l.algorithm = Algorithm::concurrency;
        else if (algo == "quota") l.algorithm = Algorithm::quota;
        else
            r.fail(n["algorithm"],
                   "unknown algorithm '" + algo + "' (token_bucket, leaky_bucket, concurrency or quota)");
        if (n["unit"]) l.unit = unit(n["unit"], l.algorithm == Algorithm::quota);
        if (n["enforce"]) l.enforce = r.boolean(n["enforce"], "enforce");
        if (n["models"]) l.models = r.strings(n["models"], "models");
        if (l.algorithm == Algorithm::concurrency) concurrency_fields(n, l);
        else if (l.algorithm == Algorithm::quota) quota_fields(n, l);
        else rate_fields(n, l);
        if (n["adaptive"]) {
            if (l.algorithm != Algorithm::token_bucket && l.algorithm != Algorithm::leaky_bucket)
                r.fail(n["adaptive"],
                       "limit '" + l.name + "': adaptive applies to token_bucket and leaky_bucket limits");
            l.adaptive = adaptive(n["adaptive"], l);
        }
        return l;
    }

    AdaptiveRate adaptive(const YAML::Node& n, const LimitSpec& l) {
        r.expect_map(n, "adaptive", {"signal", "target", "min_rate"});
        AdaptiveRate a;
        if (!n["signal"] || !n["target"]) r.fail(n, "adaptive needs 'signal' (queue, kv_cache or ttft) and 'target'");
        auto signal = r.string_of(n["signal"], "adaptive.signal");
        if (signal == "queue") a.signal = LoadSignal::queue;
        else if (signal == "kv_cache") a.signal = LoadSignal::kv_cache;
        else if (signal == "ttft") a.signal = LoadSignal::ttft;
        else r.fail(n["signal"], "adaptive.signal must be queue, kv_cache or ttft, got '" + signal + "'");
        a.target = a.signal == LoadSignal::ttft ? static_cast<double>(r.duration(n["target"], "adaptive.target")) / 1e9
                                                : r.positive(n["target"], "adaptive.target");
        if (!(a.target > 0) || (a.signal == LoadSignal::kv_cache && a.target > 1) || a.target > 1e9)
            r.fail(n["target"], a.signal == LoadSignal::kv_cache ? "adaptive.target for kv_cache is a share, 0 to 1"
                                                                 : "adaptive.target must be above 0");
        a.min_rate_per_s =
            n["min_rate"] ? r.rate(n["min_rate"], "adaptive.min_rate") : std::max(k_min_rate, l.rate_per_s / 10);
        if (!(a.min_rate_per_s >= k_min_rate) || a.min_rate_per_s > l.rate_per_s)
            r.fail(n["min_rate"] ? n["min_rate"] : n,
                   "adaptive.min_rate must be positive and at most the limit's rate");
        // Adapting follows the model servers the limit sends to: one of them must be scraped.
        bool scraped = false;
        auto consider = [&](const RouteConfig& route) {
            for (const auto& u : route.upstreams) scraped = scraped || config.upstreams[u.upstream].metrics;
        };
        if (parsing_route) consider(*parsing_route);
        else
            for (const auto& route : config.routes) consider(route);
        if (!scraped)
            r.fail(n, "limit '" + l.name +
                          "' is adaptive, but no upstream of the routes it applies to has 'metrics' to follow");
        a.rate_per_s = std::make_shared<std::atomic<double>>(l.rate_per_s);
        return a;
    }

    Unit unit(const YAML::Node& n, bool quota) {
        auto u = r.string_of(n, "unit");
        if (u == "requests") return Unit::requests;
        if (u == "cost") return Unit::cost;
        if (quota && u == "tokens") return Unit::tokens;
        if (quota && u == "usd") return Unit::usd;
        if (u == "tokens" || u == "usd")
            r.fail(n, "unit " + u + " applies only to quota limits (a rate counts requests or cost)");
        r.fail(n, quota ? "unit must be requests, cost, tokens or usd, got '" + u + "'"
                        : "unit must be requests or cost, got '" + u + "'");
    }

    /// A capacity, max or quota limit: within what the limiter holds, and at least one request.
    void check_room(const YAML::Node& at, const LimitSpec& l, double value, std::string_view what) {
        double least = l.unit == Unit::cost ? min_request_cost() : l.unit == Unit::requests ? 1.0 : 0.0;
        std::ostringstream msg;
        if (value < least)
            msg << "limit '" << l.name << "': " << what << " " << value << " is below one request's minimum cost "
                << least;
        else if (value > k_max_capacity)
            msg << "limit '" << l.name << "': " << what << " " << value << " is above the largest supported, "
                << k_max_capacity;
        if (!msg.str().empty()) r.fail(at, msg.str());
    }

    void reject_keys(const YAML::Node& n, const LimitSpec& l, Keys keys, std::string_view why) {
        for (auto key : keys)
            if (n[std::string(key)])
                r.fail(n[std::string(key)], "limit '" + l.name + "': '" + std::string(key) + "' " + std::string(why));
    }

    void concurrency_fields(const YAML::Node& n, LimitSpec& l) {
        if (!n["max"]) r.fail(n, "limit '" + l.name + "' (concurrency) is missing 'max'");
        l.capacity = r.positive(n["max"], "max");
        check_room(n["max"], l, l.capacity, "max");
        reject_keys(n, l, {"capacity", "rate", "initial", "mode", "max_wait", "fair", "period", "limit"},
                    "does not apply to concurrency limits");
    }

    void quota_fields(const YAML::Node& n, LimitSpec& l) {
        if (!n["period"]) r.fail(n, "limit '" + l.name + "' (quota) is missing 'period' (day, week or month)");
        auto period = r.string_of(n["period"], "period");
        if (period == "day") l.period = core::CalendarPeriod::day;
        else if (period == "week") l.period = core::CalendarPeriod::week;
        else if (period == "month") l.period = core::CalendarPeriod::month;
        else r.fail(n["period"], "period must be day, week or month, got '" + period + "'");
        if (!n["limit"]) r.fail(n, "limit '" + l.name + "' (quota) is missing 'limit'");
        l.capacity = r.positive(n["limit"], "limit");
        check_room(n["limit"], l, l.capacity, "limit");
        if (!zone) r.fail(n, "limit '" + l.name + "' (quota): no time zone database here (install tzdata)");
        l.zone = zone;
        reject_keys(n, l, {"capacity", "rate", "initial", "mode", "max_wait", "fair", "max"},
                    "does not apply to quota limits (a quota has 'period' and 'limit')");
        if (l.unit == Unit::usd) warn_unpriced(n, l);
    }

    /// SPEC §14: a model without a price costs 0 USD, which a usd quota never stops.
    void warn_unpriced(const YAML::Node& n, const LimitSpec& l) {
        bool has_default = false;
        for (const auto& m : config.models) {
            has_default |= m.pattern == "*";
            bool applies = l.models.empty() || m.pattern == "*" ||
                           std::any_of(l.models.begin(), l.models.end(),
                                       [&](const std::string& p) { return glob_match(p, m.pattern); });
            if (applies && !m.price)
                r.warn(n,
                       "limit '" + l.name + "' counts usd, but model '" + m.pattern +
                           "' has no price: its requests cost 0 USD",
                       config);
        }
        if (!has_default && l.models.empty())
            r.warn(n,
                   "limit '" + l.name +
                       "' counts usd, but models without an entry in 'models' have no price: they cost 0 USD",
                   config);
    }

    void rate_fields(const YAML::Node& n, LimitSpec& l) {
        if (!n["capacity"]) r.fail(n, "limit '" + l.name + "' is missing 'capacity'");
        if (!n["rate"]) r.fail(n, "limit '" + l.name + "' is missing 'rate'");
        l.capacity = r.positive(n["capacity"], "capacity");
        check_room(n["capacity"], l, l.capacity, "capacity");
        l.rate_per_s = r.rate(n["rate"], "rate");
        if (l.rate_per_s < k_min_rate || l.rate_per_s > k_max_rate) {
            std::ostringstream msg;
            msg << "limit '" << l.name << "': rate " << l.rate_per_s << "/s is outside the supported range "
                << k_min_rate << "/s to " << k_max_rate << "/s";
            r.fail(n["rate"], msg.str());
        }
        reject_keys(n, l, {"max"}, "applies only to concurrency limits");
        reject_keys(n, l, {"period", "limit"}, "applies only to quota limits");
        if (l.algorithm == Algorithm::token_bucket) {
            if (n["initial"]) {
                l.initial = r.number(n["initial"], "initial");
                if (l.initial < 0 || l.initial > 1) r.fail(n["initial"], "initial must be between 0 and 1");
            }
            reject_keys(n, l, {"mode", "max_wait", "fair"}, "applies only to leaky_bucket limits");
            return;
        }
        reject_keys(n, l, {"initial"}, "applies only to token_bucket limits");
        if (n["mode"]) {
            auto m = r.string_of(n["mode"], "mode");
            if (m == "police") l.mode = LeakyMode::police;
            else if (m == "shape") l.mode = LeakyMode::shape;
            else r.fail(n["mode"], "mode must be police or shape, got '" + m + "'");
        }
        if (l.mode == LeakyMode::shape) {
            if (n["max_wait"]) l.max_wait = r.duration(n["max_wait"], "max_wait");
            if (n["fair"]) l.fair = r.boolean(n["fair"], "fair");
        } else {
            reject_keys(n, l, {"max_wait", "fair"}, "applies only to mode: shape");
        }
    }

    void quotas(const YAML::Node& n) {
        r.expect_map(n, "quotas", {"timezone"});
        if (!n["timezone"]) return;
        config.quota_timezone = r.string_of(n["timezone"], "quotas.timezone");
        zone = core::find_time_zone(config.quota_timezone);
        if (!zone)
            r.fail(n["timezone"], "unknown time zone '" + config.quota_timezone +
                                      "' (an IANA name such as UTC, Europe/Berlin or Asia/Shanghai)");
    }

    ModelPrice price(const YAML::Node& n) {
        r.expect_map(n, "price", {"input", "output", "cached_input"});
        ModelPrice p;
        auto usd = [&](const char* key) {
            double v = r.number(n[key], std::string("price.") + key);
            if (!(v >= 0 && v <= 1e9))
                r.fail(n[key], std::string("price.") + key + " must be between 0 and 1e9 USD per 1M tokens");
            return v;
        };
        if (!n["input"] || !n["output"]) r.fail(n, "price needs 'input' and 'output' (USD per 1M tokens)");
        p.input = usd("input");
        p.output = usd("output");
        p.cached_input = n["cached_input"] ? usd("cached_input") : p.input;
        return p;
    }

    std::vector<LimitSpec> limits(const YAML::Node& n, std::string_view what) {
        r.expect_sequence(n, what);
        std::vector<LimitSpec> out;
        for (const auto& item : n) {
            auto l = limit(item);
            for (const auto& other : out)
                if (other.name == l.name)
                    r.fail(item["name"], "duplicate limit name '" + l.name + "' in " + std::string(what));
            out.push_back(std::move(l));
        }
        return out;
    }

    void routes(const YAML::Node& n) {
        r.expect_sequence(n, "routes");
        if (n.size() == 0) r.fail(n, "routes must list at least one route");
        for (const auto& item : n) {
            r.expect_map(item, "route",
                         {"path", "path_prefix", "upstreams", "models", "limits", "balance", "affinity", "retry"});
            RouteConfig route;
            if (item["path"] && item["path_prefix"])
                r.fail(item["path_prefix"], "a route takes either 'path' or 'path_prefix', not both");
            if (item["path"]) route.path = r.string_of(item["path"], "path");
            else if (item["path_prefix"]) {
                route.path = r.string_of(item["path_prefix"], "path_prefix");
                route.prefix = true;
            } else r.fail(item, "route is missing 'path' or 'path_prefix'");
            if (route.path.front() != '/')
                r.fail(item["path"] ? item["path"] : item["path_prefix"], "route path must start with '/'");
            if (!item["upstreams"]) r.fail(item, "route '" + route.path + "' is missing 'upstreams'");
            const auto& ups = item["upstreams"];
            r.expect_sequence(ups, "route upstreams");
            if (ups.size() == 0) r.fail(ups, "route '" + route.path + "' lists no upstreams");
            for (const auto& u : ups) {
                WeightedUpstream wu;
                YAML::Node name_node = u;
                if (u.IsMap()) {
                    r.expect_map(u, "route upstream", {"name", "weight"});
                    if (!u["name"]) r.fail(u, "route upstream is missing 'name'");
                    name_node.reset(u["name"]);  // operator= would assign through the alias
                    if (u["weight"]) wu.weight = static_cast<unsigned>(r.whole(u["weight"], "weight", 1, 1000000));
                }
                auto name = r.string_of(name_node, "upstream name");
                auto it = std::find_if(config.upstreams.begin(), config.upstreams.end(),
                                       [&](const UpstreamConfig& c) { return c.name == name; });
                if (it == config.upstreams.end()) r.fail(name_node, "unknown upstream '" + name + "'");
                wu.upstream = static_cast<std::size_t>(it - config.upstreams.begin());
                route.upstreams.push_back(wu);
            }
            if (item["models"]) route.models = r.strings(item["models"], "models");
            if (item["balance"]) {
                auto b = r.string_of(item["balance"], "balance");
                if (b == "weighted") route.balance = Balance::weighted;
                else if (b == "least_loaded") route.balance = Balance::least_loaded;
                else if (b == "prefix_affinity") route.balance = Balance::prefix_affinity;
                else
                    r.fail(item["balance"],
                           "balance must be weighted, least_loaded or prefix_affinity, got '" + b + "'");
            }
            if (const auto& a = item["affinity"]) {
                r.expect_map(a, "route affinity", {"prefix_tokens", "max_load"});
                if (route.balance != Balance::prefix_affinity)
                    r.fail(a, "'affinity' applies to 'balance: prefix_affinity' only");
                if (a["prefix_tokens"])
                    route.affinity.prefix_tokens = r.whole(a["prefix_tokens"], "affinity.prefix_tokens", 1, 1'000'000);
                if (a["max_load"]) {
                    route.affinity.max_load = r.number(a["max_load"], "affinity.max_load");
                    if (!(route.affinity.max_load >= 1 && route.affinity.max_load <= 100))
                        r.fail(a["max_load"], "affinity.max_load must be from 1 to 100");
                }
            }
            if (const auto& t = item["retry"]) {
                r.expect_map(t, "route retry", {"on", "attempts"});
                if (!t["on"]) r.fail(t, "retry needs 'on': the upstream statuses to retry, e.g. [429, 503]");
                r.expect_sequence(t["on"], "retry.on");
                for (const auto& s : t["on"]) {
                    auto status = static_cast<unsigned>(r.whole(s, "retry.on", 400, 599));
                    route.retry.on.push_back(status);
                }
                route.retry.attempts = 1;
                if (t["attempts"])
                    route.retry.attempts = static_cast<unsigned>(r.whole(t["attempts"], "retry.attempts", 0, 8));
            }
            parsing_route = &route;
            if (item["limits"]) {
                route.limits = limits(item["limits"], "route limits");
                for (std::size_t i = 0; i < route.limits.size(); ++i)
                    if (route.limits[i].per_subject)
                        r.fail(item["limits"][i]["per"], "per: subject is for tier and tenant limits only");
            }
            parsing_route = nullptr;
            config.routes.push_back(std::move(route));
        }
    }

    void tiers(const YAML::Node& n) {
        if (!n.IsMap()) r.fail(n, "tiers must be a mapping of tier name to settings");
        for (const auto& kv : n) {
            r.expect_map(kv.second, "tier", {"limits", "priority"});
            TierConfig tier;
            tier.name = r.string_of(kv.first, "tier name");
            if (const auto& p = kv.second["priority"]) {
                auto v = r.string_of(p, "priority");
                if (v == "critical") tier.priority = Priority::critical;
                else if (v == "standard") tier.priority = Priority::standard;
                else if (v == "sheddable") tier.priority = Priority::sheddable;
                else r.fail(p, "priority must be critical, standard or sheddable, got '" + v + "'");
            }
            if (kv.second["limits"]) tier.limits = limits(kv.second["limits"], "tier limits");
            config.tiers.push_back(std::move(tier));
        }
    }

    std::string key_digest(const YAML::Node& node) {
        auto text = r.string_of(node, "key");
        if (text.rfind("sha256:", 0) == 0) {
            auto raw = core::digest_from_hex(std::string_view(text).substr(7));
            if (!raw) r.fail(node, "sha256: keys need 64 lowercase hex digits");
            return *raw;
        }
        if (text.rfind("env:", 0) == 0) {
            auto env = text.substr(4);
            const char* value = std::getenv(env.c_str());
            if (!value || !*value) r.fail(node, "environment variable " + env + " is not set");
            text = value;
        } else {
            r.warn(node, "plain-text API key; use `tokengate hash-key` and a sha256: entry in production", config);
        }
        auto d = core::sha256(text);
        return std::string(reinterpret_cast<const char*>(d.data()), d.size());
    }

    void auth(const YAML::Node& n) {
        r.expect_map(n, "auth", {"jwt", "subject", "keys_file"});
        if (n["keys_file"]) {  // made by the first key: it need not exist yet
            auto& f = config.auth.keys_file;
            f.path = relative_to_config(r.string_of(n["keys_file"], "auth.keys_file"));
            f.at = {n["keys_file"].Mark().line + 1, n["keys_file"].Mark().column + 1};
            if (f.path.empty() || f.path.back() == '/') r.fail(n["keys_file"], "auth.keys_file must name a file");
            auto dir = std::filesystem::path(f.path).parent_path();
            if (!dir.empty() && !std::filesystem::is_directory(dir))
                r.fail(n["keys_file"], "auth.keys_file's directory " + dir.string() + " does not exist");
        }
        if (const auto& s = n["subject"]) {
            r.expect_map(s, "auth.subject", {"header", "body_field", "max_per_tenant"});
            auto& subject = config.auth.subject;
            if (s["header"]) {
                subject.header = r.string_of(s["header"], "auth.subject.header");
                bool token = !subject.header.empty() && subject.header.size() <= 64 &&
                             std::all_of(subject.header.begin(), subject.header.end(), [](char c) {
                                 return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
                             });
                if (!token) r.fail(s["header"], "auth.subject.header must be a header name such as X-End-User");
            }
            if (s["body_field"]) {
                subject.body_field = r.string_of(s["body_field"], "auth.subject.body_field");
                if (subject.body_field.empty() || subject.body_field.size() > 64)
                    r.fail(s["body_field"], "auth.subject.body_field must name a field such as user");
            }
            if (s["max_per_tenant"])
                subject.max_per_tenant = r.whole(s["max_per_tenant"], "auth.subject.max_per_tenant", 1, 10'000'000);
        }
        if (!n["jwt"]) return;
        const auto& j = n["jwt"];
        r.expect_map(j, "auth.jwt",
                     {"issuer", "audiences", "jwks_file", "jwks_url", "jwks_refresh", "algorithms", "tenant_claim",
                      "tier_claim", "leeway"});
        JwtConfig jwt;
        if (j["issuer"]) jwt.issuer = r.string_of(j["issuer"], "auth.jwt.issuer");
        if (j["audiences"]) jwt.audiences = r.strings(j["audiences"], "auth.jwt.audiences");
        if (!j["jwks_file"] == !j["jwks_url"])
            r.fail(j, "auth.jwt needs one of 'jwks_file' and 'jwks_url' (the issuer's public keys)");
        if (j["jwks_file"]) jwt.jwks_file = config_file(j["jwks_file"], "auth.jwt.jwks_file", "JWKS");
        if (j["jwks_url"]) {
            UpstreamConfig url;  // the same URL rules as an upstream's
            parse_url(j["jwks_url"], url);
            jwt.jwks_url = url.url;
            jwt.jwks_https = url.https;
            jwt.jwks_host = url.host;
            jwt.jwks_port = url.port;
            jwt.jwks_path = url.base_path.empty() ? "/" : url.base_path;
        }
        if (j["jwks_refresh"]) {
            if (!j["jwks_url"]) r.fail(j["jwks_refresh"], "auth.jwt.jwks_refresh goes with jwks_url");
            jwt.jwks_refresh = r.duration(j["jwks_refresh"], "auth.jwt.jwks_refresh");
            if (jwt.jwks_refresh < core::k_nanos_per_second || jwt.jwks_refresh > 86'400 * core::k_nanos_per_second)
                r.fail(j["jwks_refresh"], "auth.jwt.jwks_refresh must be between 1s and 24h");
        }
        static const std::set<std::string> k_algorithms{"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"};
        jwt.algorithms = {k_algorithms.begin(), k_algorithms.end()};
        if (j["algorithms"]) {
            jwt.algorithms = r.strings(j["algorithms"], "auth.jwt.algorithms");
            if (jwt.algorithms.empty()) r.fail(j["algorithms"], "auth.jwt.algorithms is empty");
            for (std::size_t i = 0; i < jwt.algorithms.size(); ++i)
                if (!k_algorithms.count(jwt.algorithms[i]))
                    r.fail(j["algorithms"][i], "auth.jwt.algorithms: '" + jwt.algorithms[i] +
                                                   "' is not accepted (RS256, RS384, RS512, PS256, ES256, ES384, "
                                                   "EdDSA; never none or an HMAC)");
        }
        if (!j["tenant_claim"]) r.fail(j, "auth.jwt needs 'tenant_claim' (the claim naming the tenant)");
        jwt.tenant_claim = r.string_of(j["tenant_claim"], "auth.jwt.tenant_claim");
        if (j["tier_claim"]) jwt.tier_claim = r.string_of(j["tier_claim"], "auth.jwt.tier_claim");
        if (j["leeway"]) {
            jwt.leeway = r.duration(j["leeway"], "auth.jwt.leeway");
            if (jwt.leeway > 3'600'000'000'000) r.fail(j["leeway"], "auth.jwt.leeway must be at most 1h");
        }
        config.auth.jwt = std::move(jwt);
    }

    void tenants(const YAML::Node& n) {
        r.expect_sequence(n, "tenants");
        std::set<std::string> digests;
        for (const auto& t : n) {
            r.expect_map(t, "tenant", {"id", "tier", "keys", "limits"});
            TenantConfig tenant;
            if (!t["id"]) r.fail(t, "tenant is missing 'id'");
            tenant.id = r.string_of(t["id"], "tenant id");
            for (const auto& other : config.tenants)
                if (other.id == tenant.id) r.fail(t["id"], "duplicate tenant id '" + tenant.id + "'");
            if (t["tier"]) {
                tenant.tier = r.string_of(t["tier"], "tier");
                auto tier = std::find_if(config.tiers.begin(), config.tiers.end(),
                                         [&](const TierConfig& c) { return c.name == tenant.tier; });
                if (tier == config.tiers.end()) r.fail(t["tier"], "unknown tier '" + tenant.tier + "'");
                tenant.limits = tier->limits;
                tenant.priority = tier->priority;
            }
            if (!t["keys"]) r.fail(t, "tenant '" + tenant.id + "' is missing 'keys'");
            r.expect_sequence(t["keys"], "keys");
            if (t["keys"].size() == 0) r.fail(t["keys"], "tenant '" + tenant.id + "' has no keys");
            for (const auto& k : t["keys"]) {
                auto digest = key_digest(k);
                if (!digests.insert(digest).second)
                    r.fail(k, "this key is already assigned (one key maps to one tenant)");
                tenant.key_digests.push_back(std::move(digest));
            }
            if (t["limits"]) {
                for (auto& override_limit : limits(t["limits"], "tenant limits")) {
                    auto same = std::find_if(tenant.limits.begin(), tenant.limits.end(),
                                             [&](const LimitSpec& l) { return l.name == override_limit.name; });
                    if (same != tenant.limits.end()) *same = std::move(override_limit);
                    else tenant.limits.push_back(std::move(override_limit));
                }
            }
            config.tenants.push_back(std::move(tenant));
        }
    }
};

}  // namespace

std::shared_ptr<const GatewayConfig> load_config_text(const std::string& text, const std::string& file_name) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
        throw ConfigError(file_name, e.mark.line + 1, e.mark.column + 1, e.msg);
    }
    Loader loader{Reader(file_name), {}};
    loader.config.source_path = file_name;
    try {
        loader.load(root);
    } catch (const YAML::Exception& e) {
        throw ConfigError(file_name, e.mark.is_null() ? 1 : e.mark.line + 1, e.mark.is_null() ? 1 : e.mark.column + 1,
                          e.msg);
    }
    return std::make_shared<const GatewayConfig>(std::move(loader.config));
}

std::shared_ptr<const GatewayConfig> load_config_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ConfigError(path, 1, 1, "cannot open the configuration file");
    std::ostringstream text;
    text << in.rdbuf();
    return load_config_text(text.str(), path);
}

}  // namespace tokengate::config
