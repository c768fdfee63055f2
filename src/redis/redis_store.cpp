#include "tokengate/redis/redis_store.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <deque>
#include <optional>
#include <random>

#include "tokengate/redis/script.hpp"

#include <cmath>

namespace tokengate::redis {

namespace net = boost::asio;
using limiter::Charge;
using limiter::Decision;

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);

std::atomic<std::uint64_t> g_store_ids{0};

/// This thread's clients, by store id (a thread serves one loop; a test may run several stores).
thread_local std::vector<std::pair<std::uint64_t, void*>> t_clients;

std::string random_replica_id() {
    std::random_device rd;
    std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

const char* policy_name(config::OnStoreError e) {
    switch (e) {
        case config::OnStoreError::fail_open: return "fail_open";
        case config::OnStoreError::fail_closed: return "fail_closed";
        case config::OnStoreError::local: return "local";
    }
    return "local";
}

const char* error_name(CallError e) {
    switch (e) {
        case CallError::none: return "error";
        case CallError::timeout: return "timeout";
        case CallError::disconnected: return "disconnected";
        case CallError::unavailable: return "unavailable";
        case CallError::skipped: return "skipped";
    }
    return "error";
}

bool answered_error(const Result& r, std::string_view code) {
    return r.error == CallError::none && r.reply.is_error() && r.reply.str.starts_with(code);
}

bool is_noscript(const Result& r) { return answered_error(r, "NOSCRIPT"); }

Endpoint parse_url(const std::string& url) {
    try {
        return Endpoint::parse(url);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("store.redis.url '" + url + "': " + e.what());
    }
}

/// A decision that took nothing: each charge's status says `admitted`, at full capacity.
Decision nothing_taken(std::span<const Charge> charges, bool admitted) {
    Decision d;
    d.statuses.resize(charges.size());
    for (std::size_t i = 0; i < charges.size(); ++i) {
        auto& s = d.statuses[i];
        s.spec = charges[i].spec;
        s.level = charges[i].level;
        s.verdict.admitted = admitted;
        s.verdict.remaining = charges[i].spec->capacity;
    }
    return d;
}

}  // namespace

StoreOptions options_from_env(const config::RedisConfig& config) {
    StoreOptions o;
    o.config = config;
    if (const char* u = std::getenv("TOKENGATE_REDIS_USERNAME")) o.username = u;
    if (const char* p = std::getenv("TOKENGATE_REDIS_PASSWORD")) o.password = p;
    return o;
}

/// One Redis master, as every worker sees it: the one there is, or one of a cluster's.
struct RedisStore::Node {
    Node(Endpoint where, const core::Clock& clock, unsigned failures_to_open, core::Nanos cooldown,
         std::function<void(bool)> on_change)
        : endpoint(std::move(where)), breaker(clock, failures_to_open, cooldown, std::move(on_change)) {}
    Endpoint endpoint;
    CircuitBreaker breaker;
    std::atomic<bool> healthy{true};
};

/// One worker's connections to one master, and the settlements on their way to it.
struct RedisStore::Shard {
    Node* node = nullptr;
    std::vector<std::shared_ptr<Connection>> connections;
    std::string sha;  // of the script, as these connections loaded it
    // Settlements waiting for the next batch (SPEC §18: one call every flush_interval).
    std::vector<std::vector<std::string>> unsent;
    std::optional<net::steady_timer> flush_timer;
    bool flush_armed = false;
    bool batch_in_flight = false;
    bool connected_once = false;  // until then a call waits for it (a master just met), within timeout
    // mode sentinel: batches and their WAIT, which blocks its connection, away from decisions.
    std::shared_ptr<Connection> settler;
};

/// What Redis answered a decision: the call's result and, when it went well in a call of many,
/// the decision's verdict in that call's reply (which `call_reply` keeps).
struct RedisStore::Answer {
    Result result;
    std::shared_ptr<const Reply> call_reply;
    std::span<const Reply> verdict;
};

/// A decision waiting for the call that takes it with the others of its turn of the loop.
struct RedisStore::Together {
    explicit Together(const net::any_io_executor& ex) : wake(ex, std::chrono::steady_clock::time_point::max()) {}
    std::vector<std::string> args;  // its own decide_call
    std::chrono::steady_clock::time_point queued = std::chrono::steady_clock::now();
    Answer answer;
    net::steady_timer wake;  // cancelled when the answer is there
};

struct RedisStore::Client {
    net::any_io_executor ex;
    unsigned connections_per_shard = 1;
    std::vector<std::unique_ptr<Shard>> shards;  // by the master's lasting index
    std::deque<std::vector<std::string>> retry;
    // Decisions of this turn of the loop, sent in one call once the turn's handlers have run, or
    // while such a call is out, held until it is answered.
    std::vector<std::shared_ptr<Together>> together;
    std::size_t together_in_flight = 0;
};

RedisStore::RedisStore(StoreOptions options, const core::Clock& clock, StoreEvents events)
    : options_(std::move(options)),
      clock_(clock),
      endpoint_(parse_url(options_.config.url)),
      keys_{options_.config.prefix, options_.cluster != nullptr},
      replica_id_(random_replica_id()),
      local_(clock),
      id_(++g_store_ids),
      leases_(options_.leases ? std::optional<LeaseBook>(std::in_place, options_.leases->fraction,
                                                         options_.leases->min_period, clock)
                              : std::nullopt),
      events_(std::move(events)) {
    handshake_ = login_commands(options_, endpoint_);
    // A master the sentinels named may have been demoted since: ROLE tells before any call.
    if (options_.sentinels) handshake_.push_back({"ROLE"});
    // On every node, so that EVALSHA finds it on each master of a cluster.
    handshake_.push_back({"SCRIPT", "LOAD", std::string(limiter_script())});
    if (!options_.cluster) {
        node(0);
        return;
    }
    // A master the workers have no connections to yet gets them before a call needs one.
    options_.cluster->on_change([this](const Cluster::Map& map) {
        auto now = std::make_shared<const Cluster::Map>(map);
        std::lock_guard lock(clients_mutex_);
        for (auto& c : clients_) net::post(c->ex, [this, raw = c.get(), now] { open_shards(*raw, *now); });
    });
    options_.cluster->start();
}

std::vector<std::vector<std::string>> login_commands(const StoreOptions& options, const Endpoint& endpoint) {
    std::vector<std::vector<std::string>> commands;
    if (!options.password.empty()) {
        if (options.username.empty()) commands.push_back({"AUTH", options.password});
        else commands.push_back({"AUTH", options.username, options.password});
    }
    if (endpoint.db != 0) commands.push_back({"SELECT", std::to_string(endpoint.db)});
    return commands;
}

RedisStore::~RedisStore() { stop(); }

RedisStore::Node& RedisStore::node(std::size_t index) {
    std::lock_guard lock(nodes_mutex_);
    while (nodes_.size() <= index) {
        auto where = endpoint_;
        if (options_.cluster) {
            auto map = options_.cluster->map();
            if (nodes_.size() < map->nodes.size()) where = map->nodes[nodes_.size()];
        }
        auto name = fmt::format("{}:{}", where.host, where.port);
        auto on_change = [this, name = options_.cluster ? " (" + name + ")" : std::string()](bool open) {
            auto open_now = open ? ++open_breakers_ : --open_breakers_;
            if (events_.breaker && (open ? open_now == 1 : open_now == 0)) events_.breaker(open);
            if (open)
                spdlog::warn("redis circuit breaker open{}: skipping Redis, probing every {} ms", name,
                             options_.breaker_cooldown / 1'000'000);
            else spdlog::info("redis circuit breaker closed{}: shared limits resume", name);
        };
        nodes_.push_back(std::make_unique<Node>(std::move(where), clock_, options_.failures_to_open,
                                                options_.breaker_cooldown, std::move(on_change)));
    }
    return *nodes_[index];
}

void RedisStore::attach(net::any_io_executor ex, unsigned connections) {
    auto client = std::make_unique<Client>();
    client->ex = ex;
    client->connections_per_shard = std::max(1u, connections);
    auto* raw = client.get();
    {
        std::lock_guard lock(clients_mutex_);
        clients_.push_back(std::move(client));
    }
    // Binds on the loop's own thread: calls made there find this client without a lock.
    net::post(ex, [this, raw] {
        t_clients.emplace_back(id_, raw);
        if (options_.cluster) open_shards(*raw, *options_.cluster->map());
        else shard_of(*raw, 0);
        net::co_spawn(raw->ex, retry_loop(*raw), net::detached);
    });
}

RedisStore::Shard& RedisStore::shard_of(Client& c, std::size_t index) {
    if (c.shards.size() <= index) c.shards.resize(index + 1);
    if (auto& existing = c.shards[index]) return *existing;
    auto shard = std::make_unique<Shard>();
    shard->node = &node(index);
    shard->flush_timer.emplace(c.ex);
    for (unsigned i = 0; i < c.connections_per_shard; ++i)
        shard->connections.push_back(open_connection(c, *shard, true));
    if (options_.sentinels) shard->settler = open_connection(c, *shard, false);
    for (auto& conn : shard->connections) {
        if (options_.sentinels) options_.sentinels->follow(conn);
        else conn->start();
    }
    if (shard->settler) options_.sentinels->follow(shard->settler);
    c.shards[index] = std::move(shard);
    return *c.shards[index];
}

void RedisStore::open_shards(Client& c, const Cluster::Map& map) {
    if (stopping_.load()) return;
    // The masters that serve slots, before any call needs one: a connection is not ready at once.
    for (auto owner : map.owner)
        if (owner >= 0 && (c.shards.size() <= static_cast<std::size_t>(owner) || !c.shards[owner]))
            shard_of(c, static_cast<std::size_t>(owner));
}

std::shared_ptr<Connection> RedisStore::open_connection(Client& client, Shard& shard, bool counts_as_ready) {
    auto* raw = &shard;
    auto connection = std::make_shared<Connection>(
        client.ex, shard.node->endpoint, handshake_,
        [this, raw, counts_as_ready](bool ready, const std::vector<Reply>& replies) {
            if (ready && !replies.empty() && replies.back().type == Reply::Type::string) raw->sha = replies.back().str;
            if (ready) {
                raw->connected_once = true;
                raw->node->breaker.probe_now();
            } else if (options_.sentinels) options_.sentinels->ask_again();
            else if (options_.cluster) options_.cluster->ask_again();  // a master gone: who serves its slots?
            if (!counts_as_ready) return;
            if (ready) ++ready_connections_;
            else --ready_connections_;
        },
        options_.tls);
    if (options_.sentinels)
        connection->set_vetting([this, role_index = handshake_.size() - 2](const std::vector<Reply>& replies) {
            auto why = expect_master(role_index)(replies);
            if (why.empty()) note_replicas(replies[role_index]);
            return why;
        });
    return connection;
}

void RedisStore::start_heartbeat(net::any_io_executor ex) {
    net::post(ex, [this] {
        if (auto* c = client_here()) net::co_spawn(c->ex, heartbeat_loop(*c), net::detached);
    });
}

void RedisStore::stop() {
    if (stopping_.exchange(true)) return;
    if (options_.sentinels) options_.sentinels->stop();
    if (options_.cluster) options_.cluster->stop();
    std::lock_guard lock(clients_mutex_);
    for (auto& c : clients_)
        for (auto& shard : c->shards) {
            if (!shard) continue;
            for (auto& conn : shard->connections) conn->stop();
            shard->connections.clear();
            if (shard->settler) shard->settler->stop();
            // Asio objects must go before their event loop does, and the loops are destroyed
            // before the store (nothing sends after stopping_: settlements wait in the retry queue).
            shard->settler.reset();
            shard->flush_timer.reset();
        }
}

std::size_t RedisStore::settlements_outstanding() const {
    return settlements_in_flight_.load() + settlements_waiting_.load() + renewals_in_flight_.load();
}

RedisStore::Client* RedisStore::client_here() {
    for (const auto& [id, client] : t_clients)
        if (id == id_) return static_cast<Client*>(client);
    return nullptr;
}

RedisStore::Client* RedisStore::any_client() {
    std::lock_guard lock(clients_mutex_);
    return clients_.empty() ? nullptr : clients_.front().get();
}

bool RedisStore::ready() {
    auto* c = client_here();
    if (!c) return false;
    for (const auto& shard : c->shards)
        if (shard && std::any_of(shard->connections.begin(), shard->connections.end(),
                                 [](const auto& conn) { return conn->ready(); }))
            return true;
    return false;
}

Connection* RedisStore::pick(Shard& shard) {
    // Fill one connection before using the next: commands written together are read and
    // answered together, so a busy loop costs Redis one syscall for many calls.
    constexpr std::size_t k_batch = 32;
    Connection* least = nullptr;
    for (auto& conn : shard.connections) {
        if (!conn->ready()) continue;
        if (conn->pending() < k_batch) return conn.get();
        if (!least || conn->pending() < least->pending()) least = conn.get();
    }
    return least;
}

std::optional<std::size_t> RedisStore::route(std::span<const std::string> args) const {
    if (!options_.cluster) return 0;
    auto slot = call_slot(args);
    if (!slot) return std::nullopt;
    auto owner = options_.cluster->map()->node_of(*slot);
    if (owner < 0) return std::nullopt;
    return static_cast<std::size_t>(owner);
}

core::Nanos RedisStore::quota_now() const {
    return options_.script_clock ? options_.script_clock->unix_now() : clock_.unix_now();
}

double RedisStore::script_now_us() const {
    return options_.script_clock ? static_cast<double>(options_.script_clock->now()) / 1000.0 : -1.0;
}

std::string RedisStore::next_lease() {
    auto n = lease_counter_.fetch_add(1, std::memory_order_relaxed);
    char buf[24];
    buf[0] = '.';
    auto* end = std::to_chars(buf + 1, buf + sizeof buf, n, 16).ptr;  // snprintf's formatter costs ~10x
    std::string lease;
    lease.reserve(replica_id_.size() + static_cast<std::size_t>(end - buf));  // one allocation
    lease += replica_id_;
    lease.append(buf, end);
    return lease;
}

net::awaitable<Result> RedisStore::call(Client& c, std::vector<std::string> args,
                                        std::optional<std::chrono::nanoseconds> within) {
    // A cluster may redirect a call a few times (a slot migrating, then moved), each followed
    // at once; TRYAGAIN (a migration's keys half moved) waits a little, within the timeout.
    constexpr int k_attempts = 8;
    auto timeout = within.value_or(std::chrono::nanoseconds(options_.config.timeout));
    auto give_up = std::chrono::steady_clock::now() + timeout;
    bool as_text = false;
    std::optional<std::size_t> asked;  // ASK: that master, this once, after ASKING
    for (int attempt = 0; attempt < k_attempts; ++attempt) {
        auto index = asked ? asked : route(args);
        if (!index) {
            // A slot nobody serves (yet): the map is asked for again.
            if (options_.cluster) options_.cluster->ask_again();
            count_call("unavailable");
            co_return Result{CallError::unavailable, {}};
        }
        auto& shard = shard_of(c, *index);
        auto& node = *shard.node;
        if (!asked && !node.breaker.allow()) {
            count_call("skipped");
            co_return Result{CallError::skipped, {}};
        }
        if (as_text || shard.sha.empty()) as_eval(args);
        else args[1] = shard.sha;
        auto* conn = pick(shard);
        // A master met just now (a redirection, or a slot moved to a new one): its connections
        // are on their way.
        for (net::steady_timer pause(c.ex);
             !conn && (attempt > 0 || !shard.connected_once) && std::chrono::steady_clock::now() < give_up;) {
            pause.expires_after(std::chrono::milliseconds(2));
            co_await pause.async_wait(k_use);
            conn = pick(shard);
        }
        if (!conn) {
            node.breaker.record(false);
            note_failure(node, CallError::unavailable);
            co_return Result{CallError::unavailable, {}};
        }
        if (asked) {
            static const std::string asking[] = {"ASKING"};
            conn->send(asking, [](Result) {});
            asked.reset();
        }
        // An attempt after a redirection gets its own timeout.
        auto result = co_await round_trip(*conn, args, timeout);
        if (is_noscript(result) && !as_text) {
            // SCRIPT FLUSH or a restarted Redis: send the text once, which loads it again.
            count_call("noscript");
            as_text = true;
            continue;
        }
        if (options_.cluster && result.error == CallError::none) {
            if (auto redirect = parse_redirect(result.reply, endpoint_)) {
                ++redirects_;
                count_call(redirect->ask ? "ask" : "moved");
                if (redirect->ask) asked = options_.cluster->index_of(redirect->to);
                else options_.cluster->moved(redirect->slot, redirect->to);
                continue;
            }
            if (answered_error(result, "TRYAGAIN") && std::chrono::steady_clock::now() < give_up) {
                count_call("tryagain");
                net::steady_timer pause(c.ex, std::chrono::milliseconds(5));
                co_await pause.async_wait(k_use);
                continue;
            }
        }
        node.breaker.record(result.ok());
        if (result.ok()) note_success(node);
        else note_failure(node, result.error);
        co_return result;
    }
    count_call("unavailable");
    co_return Result{CallError::unavailable, {}};
}

void RedisStore::note_success(Node& node) {
    count_call("ok");
    if (!node.healthy.load(std::memory_order_relaxed) && !node.healthy.exchange(true)) {
        --unhealthy_nodes_;
        if (options_.cluster)
            spdlog::info("redis {}:{} answers again: its tenants' limits are shared across replicas again",
                         node.endpoint.host, node.endpoint.port);
        else spdlog::info("redis answers again: limits are shared across replicas again");
    }
}

void RedisStore::note_failure(Node& node, CallError error) {
    count_call(error_name(error));
    if (node.healthy.load(std::memory_order_relaxed) && node.healthy.exchange(false)) {
        auto divisor = std::max(1u, live_replicas());
        if (unhealthy_nodes_++ == 0) {
            local_.clear();
            local_.set_share_divisor(divisor);
        }
        auto local = options_.config.on_error == config::OnStoreError::local
                         ? fmt::format(", each limit ÷ {} live replicas, decided in this process", divisor)
                         : std::string();
        if (options_.cluster)
            spdlog::warn("redis {}:{} unavailable ({}): on_error {} applies to the tenants it serves{}",
                         node.endpoint.host, node.endpoint.port, error_name(error),
                         policy_name(options_.config.on_error), local);
        else
            spdlog::warn("redis unavailable ({}): on_error {} applies{}", error_name(error),
                         policy_name(options_.config.on_error), local);
    }
}

net::awaitable<Decision> RedisStore::decide(std::span<const Charge> charges) {
    co_return co_await run_decision(charges, true);
}

net::awaitable<Decision> RedisStore::peek(std::span<const Charge> charges) {
    co_return co_await run_decision(charges, false);
}

net::awaitable<bool> RedisStore::wait_ready(std::chrono::nanoseconds limit) {
    net::steady_timer timer(co_await net::this_coro::executor);
    constexpr auto step = std::chrono::milliseconds(10);
    for (std::chrono::nanoseconds waited{0}; !connected() && waited < limit; waited += step) {
        timer.expires_after(step);
        co_await timer.async_wait(net::as_tuple(net::use_awaitable));
    }
    co_return connected();
}

net::awaitable<Decision> RedisStore::run_decision(std::span<const Charge> charges, bool commit) {
    auto* client = client_here();
    if (!client || stopping_.load()) {
        count_call("skipped");
        co_return fallback(charges, commit);
    }
    // A peek (the admin's views) reads the shared buckets themselves, leased or not.
    if (!leases_ || !commit || std::none_of(charges.begin(), charges.end(), LeaseBook::leased)) {
        if (auto d = co_await ask_redis(*client, charges, commit)) co_return std::move(*d);
        co_return fallback(charges, commit);
    }
    // SPEC §18: the leased limits here, the tenant's in Redis, all or nothing across both.
    LeasedSplit split;
    split.shared.reserve(charges.size());  // one allocation, not one per doubling
    for (std::size_t i = 0; i < charges.size(); ++i) {
        if (LeaseBook::leased(charges[i])) {
            split.leased.push_back(&charges[i]);
            split.leased_at.push_back(i);
        } else {
            split.shared.push_back(charges[i]);
            split.shared_at.push_back(i);
        }
    }
    {
        auto short_of = co_await take_leases(*client, split.leased);
        if (!short_of) co_return fallback(charges, commit);  // Redis did not answer a renewal
        if (*short_of >= 0) {
            auto refused = nothing_taken(charges, true);  // the others were not asked
            auto at = split.leased_at[static_cast<std::size_t>(*short_of)];
            refused.statuses[at].verdict = leases_->verdict(charges[at], false);
            limiter::resolve(refused);
            co_return refused;
        }
    }
    Decision d;
    if (!split.shared.empty()) {
        auto asked = co_await ask_redis(*client, split.shared, commit);
        if (!asked) {
            leases_->give_back(split.leased);
            co_return fallback(charges, commit);
        }
        if (!asked->allowed) leases_->give_back(split.leased);
        d.keeper = asked->keeper;
        d.lease = std::move(asked->lease);
        d.statuses.resize(charges.size());
        for (std::size_t k = 0; k < split.shared_at.size(); ++k) d.statuses[split.shared_at[k]] = asked->statuses[k];
    } else {
        d.statuses.resize(charges.size());
        d.keeper = limiter::Keeper::shared;
    }
    bool taken = d.keeper == limiter::Keeper::shared;
    for (std::size_t k = 0; k < split.leased.size(); ++k) {
        const auto& c = *split.leased[k];
        auto& st = d.statuses[split.leased_at[k]];
        st.spec = c.spec;
        st.level = c.level;
        st.verdict = leases_->verdict(c, true);
        st.charged = taken;
    }
    limiter::resolve(d);
    if (taken)
        for (auto& renewal : leases_->due(split.leased))
            net::co_spawn(client->ex, renew(*client, std::move(renewal.charge)), net::detached);
    co_return d;
}

net::awaitable<std::optional<std::ptrdiff_t>> RedisStore::take_leases(Client& client,
                                                                      std::span<const Charge* const> leased) {
    net::steady_timer pause(client.ex);
    auto deadline = clock_.now() + options_.config.timeout;
    for (;;) {
        auto lacking = leases_->take(leased);
        if (!lacking) co_return -1;
        const auto& charge = *leased[*lacking];
        if (leases_->waiting_for_refill(charge)) co_return static_cast<std::ptrdiff_t>(*lacking);
        if (leases_->start_renewal(charge)) {
            // Short: one renewal for this lease, taken before this request goes on.
            auto want = charge;
            want.amount = leases_->lease_size(charge);
            auto granted = co_await lease_from_redis(client, want, charge.amount);
            if (granted < 0) co_return std::nullopt;
            if (granted == 0) co_return static_cast<std::ptrdiff_t>(*lacking);
            continue;
        }
        // Another request's renewal of it is on its way: its answer decides this one too.
        if (clock_.now() >= deadline) co_return static_cast<std::ptrdiff_t>(*lacking);
        pause.expires_after(std::chrono::milliseconds(1));
        co_await pause.async_wait(k_use);
    }
}

net::awaitable<void> RedisStore::renew(Client& client, Charge want) { co_await lease_from_redis(client, want, 0); }

net::awaitable<double> RedisStore::lease_from_redis(Client& client, const Charge& want, double least) {
    ++renewals_in_flight_;
    auto r = co_await call(client, lease_call("", keys_, want, least, script_now_us()).args);
    --renewals_in_flight_;
    auto answer = r.ok() ? parse_lease(r.reply) : std::nullopt;
    if (!answer) {
        if (r.ok()) spdlog::error("redis script: unexpected reply to a lease");
        leases_->granted(want, 0, std::nan(""));
        co_return -1;
    }
    leases_->granted(want, answer->first, answer->second);
    if (draining_.load()) release_leases();  // what came after the shutdown's release goes back too
    co_return answer->first;
}

void RedisStore::release_leases() {
    draining_ = true;
    return_leases(true);
}

void RedisStore::return_leases(bool everything) {
    if (!leases_) return;
    for (auto& unused : leases_->expire(everything)) {
        submit(lease_return_call("", keys_, unused.charge, keys_.marker(unused.charge), script_now_us()).args);
    }
}

net::awaitable<std::optional<Decision>> RedisStore::ask_redis(Client& client, std::span<const Charge> charges,
                                                              bool commit) {
    auto lease = commit && holds_under_lease(charges) ? next_lease() : std::string();
    auto lease_ms = static_cast<double>(options_.lease) / 1e6;
    auto unix_now = quota_now();
    auto windows = quota_windows(charges, unix_now);
    auto args = decide_call("", keys_, charges, windows, unix_now, commit, lease, lease_ms, script_now_us()).args;
    // A cluster decides each tenant on its own shard: one call each there. (Not a co_await in
    // each arm of ?:, which GCC 12 miscompiles: a double free.)
    Answer answer;
    if (commit && !options_.cluster) answer = co_await decide_together(client, std::move(args));
    else answer.result = co_await call(client, std::move(args));
    const auto& r = answer.result;
    if (r.ok()) {
        std::string error;
        auto d = answer.call_reply ? parse_decision(answer.verdict, charges, error)
                                   : parse_decision(r.reply, charges, error);
        if (d) {
            for (std::size_t i = 0; i < charges.size(); ++i) d->statuses[i].window = windows[i];
            if (!commit) {
                for (auto& s : d->statuses) s.charged = false;
            } else if (d->allowed) {
                d->keeper = limiter::Keeper::shared;
                d->lease = std::move(lease);
            }
            flush_retries(client);
            co_return std::move(*d);
        }
        spdlog::error("redis: {}", error);
    } else if (r.error == CallError::none) {
        spdlog::error("redis refused the limiter script: {}", r.reply.str);
        // A master demoted under us answers READONLY: ask where the master is now.
        if (options_.sentinels && r.reply.str.rfind("READONLY", 0) == 0) options_.sentinels->ask_again();
    }
    if (commit && (r.error == CallError::timeout || r.error == CallError::disconnected)) {
        // Sent, and no answer: the script may have run after all. Give back any concurrency
        // slot it took (a release of a lease that does not exist changes nothing).
        std::vector<Charge> slots;
        for (const auto& c : charges)
            if (c.spec->algorithm == config::Algorithm::concurrency) slots.push_back(c);
        if (!slots.empty()) keep_for_retry(client, settle_call("", keys_, slots, {}, lease, -1).args);
    }
    co_return std::nullopt;
}

net::awaitable<RedisStore::Answer> RedisStore::decide_together(Client& c, std::vector<std::string> args) {
    auto waiting = std::make_shared<Together>(c.ex);
    waiting->args = std::move(args);
    c.together.push_back(waiting);
    // Posted, so it runs after the handlers already queued: the requests that this turn of the
    // loop read each reach their decision first, and go in the same call. While a call of this
    // worker's is out, they wait for its answer and go together then: with two workers at 64
    // connections, 0.08 calls a request instead of 0.11, and 0.88x the memory store's req/s
    // instead of 0.77 (docs/redis.md).
    if (c.together.size() == 1 && c.together_in_flight == 0) net::post(c.ex, [this, &c] { send_together(c); });
    co_await waiting->wake.async_wait(k_use);
    co_return std::move(waiting->answer);
}

void RedisStore::send_together(Client& c) {
    if (c.together.empty()) return;
    auto turn = std::move(c.together);
    c.together.clear();
    for (std::size_t first = 0; first < turn.size(); first += k_together_max) {
        std::vector<std::shared_ptr<Together>> part(
            turn.begin() + static_cast<std::ptrdiff_t>(first),
            turn.begin() + static_cast<std::ptrdiff_t>(std::min(turn.size(), first + k_together_max)));
        ++c.together_in_flight;
        net::co_spawn(c.ex, decide_as_one(c, std::move(part)), net::detached);
    }
}

net::awaitable<void> RedisStore::decide_as_one(Client& c, std::vector<std::shared_ptr<Together>> part) {
    // The time a decision waited for the call before is part of its timeout: a request never
    // waits on Redis longer than store.redis.timeout in all.
    auto within =
        std::chrono::nanoseconds(options_.config.timeout) - (std::chrono::steady_clock::now() - part.front()->queued);
    if (within <= std::chrono::nanoseconds::zero()) {
        for (auto& w : part) w->answer = Answer{Result{CallError::timeout, {}}, nullptr, {}};
    } else if (part.size() == 1) {
        part.front()->answer.result = co_await call(c, std::move(part.front()->args), within);
    } else {
        std::vector<std::vector<std::string>> decisions;
        decisions.reserve(part.size());
        for (auto& w : part) decisions.push_back(std::move(w->args));
        auto r = co_await call(c, decide_many_call("", decisions).args, within);
        // One reply for the call, each decision reading its own verdict in it.
        std::shared_ptr<const Reply> reply;
        std::optional<std::vector<std::span<const Reply>>> each;
        if (r.ok()) {
            reply = std::make_shared<const Reply>(std::move(r.reply));
            each = split_decisions(*reply, decisions);
            if (!each) r = Result{CallError::none, Reply{Reply::Type::error, 0, "unexpected reply to decide_many", {}}};
        }
        for (std::size_t i = 0; i < part.size(); ++i)
            part[i]->answer = each ? Answer{Result{}, reply, (*each)[i]} : Answer{r, nullptr, {}};
    }
    for (auto& w : part) w->wake.cancel();
    if (--c.together_in_flight == 0 && !c.together.empty()) send_together(c);
}

net::awaitable<limiter::ShapeQueue::StartCheck> RedisStore::queue_turn(const Decision& decision, const Charge& charge,
                                                                       std::uint64_t ticket) {
    if (decision.keeper != limiter::Keeper::shared || !charge.spec->ranked)
        co_return store::in_memory::queue_turn(local_, decision, charge, ticket);
    auto* client = client_here();
    // A queue that cannot be asked does not hold the request: it was admitted, it starts.
    limiter::ShapeQueue::StartCheck cannot_ask{false, true, clock_.now()};
    if (!client || stopping_.load()) co_return cannot_ask;
    auto r = co_await call(*client, turn_call("", keys_, charge, decision.lease, ticket, false, script_now_us()).args);
    auto now = clock_.now();
    if (r.ok())
        if (auto check = parse_turn(r.reply, now)) {
            check->wait_until = std::min(check->wait_until, now + k_turn_poll);
            co_return *check;
        }
    if (r.ok()) spdlog::error("redis script: unexpected reply to a queue turn");
    co_return cannot_ask;
}

net::awaitable<void> RedisStore::queue_leave(const Decision& decision, const Charge& charge, std::uint64_t ticket) {
    if (decision.keeper != limiter::Keeper::shared || !charge.spec->ranked) {
        store::in_memory::queue_leave(local_, decision, charge, ticket);
        co_return;
    }
    // Not waited for: a place nobody asks about is dropped by Redis within 5 s anyway.
    if (auto* client = client_here(); client && !stopping_.load())
        co_await call(*client, turn_call("", keys_, charge, decision.lease, ticket, true, script_now_us()).args);
}

Decision RedisStore::fallback(std::span<const Charge> charges, bool commit) {
    auto policy = options_.config.on_error;
    if (commit && events_.fallback) events_.fallback(policy_name(policy));
    if (policy == config::OnStoreError::local) return commit ? local_.decide(charges) : local_.peek(charges);
    auto d = nothing_taken(charges, policy == config::OnStoreError::fail_open);
    d.allowed = policy == config::OnStoreError::fail_open;
    d.unavailable = policy == config::OnStoreError::fail_closed;
    return d;  // nothing charged anywhere: nothing to settle
}

net::awaitable<std::optional<limiter::QuotaState>> RedisStore::quota(const Charge& charge, double add, bool reset) {
    auto* client = client_here();
    if (!client || stopping_.load()) co_return std::nullopt;
    auto unix_now = quota_now();
    const auto& spec = *charge.spec;
    auto window = core::calendar_window(*spec.zone, spec.period, unix_now);
    auto r = co_await call(*client, quota_call("", keys_, charge, window, unix_now, add, reset).args);
    if (!r.ok()) co_return std::nullopt;
    auto state = parse_quota(r.reply);
    if (state) state->window = window;
    co_return state;
}

void RedisStore::settle(const Decision& decision, std::span<const Charge> charged, const config::Amounts& actual) {
    if (decision.keeper == limiter::Keeper::memory) return local_.settle(charged, actual, decision.lease);
    if (decision.keeper != limiter::Keeper::shared) return;
    if (!leases_) return submit(settle_call("", keys_, charged, actual, decision.lease, script_now_us()).args);
    config::Charges in_redis;
    for (const auto& c : charged) {
        if (!LeaseBook::leased(c)) in_redis.push_back(c);
        else if (limiter::settles(c, actual)) leases_->settle(c, actual.in(c.spec->unit) - c.amount);
    }
    submit(settle_call("", keys_, in_redis, actual, decision.lease, script_now_us()).args);
}

void RedisStore::submit(std::vector<std::string> args) {
    if (args.empty()) return;
    if (auto* here = client_here()) {
        send_settlement(*here, std::move(args));
        return;
    }
    auto* c = any_client();
    if (!c) {
        if (events_.settlement_dropped) events_.settlement_dropped();
        spdlog::error("redis: a settlement was dropped (no Redis client)");
        return;
    }
    ++settlements_in_flight_;
    net::post(c->ex, [this, c, args = std::move(args)]() mutable {
        --settlements_in_flight_;
        send_settlement(*c, std::move(args));
    });
}

void RedisStore::send_settlement(Client& c, std::vector<std::string> args) {
    auto index = route(args);
    if (!index || stopping_.load()) {
        keep_for_retry(c, std::move(args));
        return;
    }
    auto& shard = shard_of(c, *index);
    if (shard.node->breaker.open()) {
        keep_for_retry(c, std::move(args));
        return;
    }
    ++settlements_in_flight_;
    shard.unsent.push_back(std::move(args));
    auto interval = options_.config.flush_interval;
    if (interval <= 0 || shard.unsent.size() >= k_batch_max) return flush_settlements(c, shard);
    if (shard.flush_armed) return;
    shard.flush_armed = true;
    shard.flush_timer->expires_after(std::chrono::nanoseconds(interval));
    shard.flush_timer->async_wait([this, &c, &shard](boost::system::error_code ec) {
        shard.flush_armed = false;
        if (!ec) flush_settlements(c, shard);
    });
}

struct RedisStore::SettleBatch {
    std::vector<std::vector<std::string>> settlements;
    Result applied;
    bool waits_for_replica = false;
    bool as_text = false;  // EVAL: the server had lost the script (NOSCRIPT)
};

void RedisStore::flush_settlements(Client& c, Shard& shard) {
    // WAIT holds the settler until its batch is confirmed: one batch at a time there.
    if ((shard.settler && shard.batch_in_flight) || shard.unsent.empty()) return;
    Connection* conn = nullptr;
    if (!shard.node->breaker.open())
        conn = shard.settler ? (shard.settler->ready() ? shard.settler.get() : nullptr) : pick(shard);
    if (!conn) {
        for (auto& args : shard.unsent) {
            --settlements_in_flight_;
            keep_for_retry(c, std::move(args));
        }
        shard.unsent.clear();
        return;
    }
    auto batch = std::make_shared<SettleBatch>();
    auto n = std::min(shard.unsent.size(), k_batch_max);
    batch->settlements.assign(std::make_move_iterator(shard.unsent.begin()),
                              std::make_move_iterator(shard.unsent.begin() + static_cast<std::ptrdiff_t>(n)));
    shard.unsent.erase(shard.unsent.begin(), shard.unsent.begin() + static_cast<std::ptrdiff_t>(n));
    seal_markers(batch->settlements, next_lease(), options_.cluster != nullptr);
    send_batch(c, shard, *conn, std::move(batch));
}

void RedisStore::send_batch(Client& c, Shard& shard, Connection& conn, std::shared_ptr<SettleBatch> batch) {
    shard.batch_in_flight = true;
    // A cluster shard's batch holds many slots: its keys cannot be declared (SPEC §18).
    auto args = settle_batch_call(shard.sha, batch->settlements, !options_.cluster).args;
    if (shard.sha.empty() || batch->as_text) as_eval(args);
    if (!shard.settler) {
        conn.send(args, [this, &c, &shard, batch](Result r) {
            batch->applied = std::move(r);
            batch_answered(c, shard, batch, std::nullopt);
        });
        return;
    }
    conn.send(args, [batch](Result r) { batch->applied = std::move(r); });
    // WAIT blocks only this connection, and Redis answers it after the batch, so the batch has
    // answered by then. A master without replicas (as just after a failover) has nobody to
    // wait for: PING keeps the order without waiting.
    batch->waits_for_replica = master_replicas_.load(std::memory_order_relaxed) != 0;
    auto wait_ms = std::to_string(std::max<core::Nanos>(1, options_.config.timeout / 1'000'000));
    const std::string wait[] = {"WAIT", "1", wait_ms};
    const std::string ping[] = {"PING"};
    std::span<const std::string> confirm = wait;
    if (!batch->waits_for_replica) confirm = ping;
    conn.send(confirm, [this, &c, &shard, batch](Result r) { batch_answered(c, shard, batch, std::move(r)); });
}

void RedisStore::batch_answered(Client& c, Shard& shard, const std::shared_ptr<SettleBatch>& batch,
                                std::optional<Result> confirmation) {
    shard.batch_in_flight = false;
    const auto& applied = batch->applied;
    if (is_noscript(applied) && !batch->as_text) {
        // SCRIPT FLUSH or a restarted Redis: the text, once, which loads it again.
        count_call("noscript");
        batch->as_text = true;
        auto* conn = shard.settler ? shard.settler.get() : pick(shard);
        if (conn && conn->ready()) return send_batch(c, shard, *conn, batch);
    }
    bool confirmed =
        !confirmation || (confirmation->ok() && (!batch->waits_for_replica || confirmation->reply.integer >= 1));
    if (applied.ok() && confirmed) {
        count_call("ok");
        settlements_in_flight_ -= batch->settlements.size();
    } else {
        // Unanswered, refused, or answered by a master no replica has confirmed yet (one that
        // fell before a replica had them would lose them): each is sent again, to whichever
        // master there is then; the script applies a lease's settlement once. In a cluster, a
        // key whose slot moved stops the batch there, before that settlement's writes: the
        // map is asked for again, and each goes where its slot is then.
        if (!applied.ok()) count_call(error_name(applied.error));
        else count_call(confirmation->ok() ? "unreplicated" : error_name(confirmation->error));
        if (options_.cluster && applied.error == CallError::none) options_.cluster->ask_again();
        for (auto& args : batch->settlements) {
            --settlements_in_flight_;
            keep_for_retry(c, std::move(args));
        }
    }
    flush_settlements(c, shard);
}

void RedisStore::keep_for_retry(Client& c, std::vector<std::string> args) {
    if (events_.settlement_retried) events_.settlement_retried();
    if (c.retry.size() >= options_.retry_capacity) {
        c.retry.pop_front();
        --settlements_waiting_;
        if (events_.settlement_dropped) events_.settlement_dropped();
    }
    c.retry.push_back(std::move(args));
    ++settlements_waiting_;
}

void RedisStore::flush_retries(Client& c) {
    if (c.retry.empty()) return;
    auto waiting = std::move(c.retry);
    c.retry.clear();
    settlements_waiting_ -= waiting.size();
    for (auto& args : waiting) {
        // Those for a master whose breaker is open wait on, without counting as retried again.
        if (auto index = route(args); index && shard_of(c, *index).node->breaker.open()) {
            c.retry.push_back(std::move(args));
            ++settlements_waiting_;
            continue;
        }
        send_settlement(c, std::move(args));
    }
}

net::awaitable<void> RedisStore::retry_loop(Client& c) {
    net::steady_timer timer(c.ex);
    while (!stopping_.load()) {
        timer.expires_after(std::chrono::milliseconds(250));
        auto [ec] = co_await timer.async_wait(k_use);
        if (ec) co_return;
        if (!c.retry.empty() && ready()) flush_retries(c);
        if (!draining_.load()) return_leases(false);  // leases idle for min_period go back
    }
}

net::awaitable<void> RedisStore::heartbeat_loop(Client& c) {
    net::steady_timer timer(c.ex);
    auto ttl_ms = 3.0 * static_cast<double>(options_.heartbeat_every) / 1e6;
    auto period = std::chrono::nanoseconds(options_.heartbeat_every);
    timer.expires_after(std::chrono::milliseconds(20));  // soon after the connections are up
    while (!stopping_.load()) {
        auto [ec] = co_await timer.async_wait(k_use);
        if (ec) co_return;
        timer.expires_after(period);
        auto r = co_await call(c, heartbeat_call("", keys_, replica_id_, ttl_ms, script_now_us()).args);
        if (r.ok() && r.reply.type == Reply::Type::integer) {
            auto n = static_cast<unsigned>(std::max<long long>(1, r.reply.integer));
            if (n != live_replicas_.exchange(n)) spdlog::info("redis: {} live replicas share the limits", n);
            if (events_.replicas) events_.replicas(n);
            flush_retries(c);
        }
        if (options_.sentinels)
            if (auto* conn = pick(shard_of(c, 0))) {
                static const std::string role[] = {"ROLE"};
                auto answer = co_await round_trip(*conn, role, std::chrono::nanoseconds(options_.config.timeout));
                if (answer.ok()) note_replicas(answer.reply);
            }
    }
}

void RedisStore::note_replicas(const Reply& role) {
    auto count = replicas_of_master(role);
    if (!count) return;
    auto now = static_cast<int>(std::min<std::size_t>(*count, 1000));
    auto was = master_replicas_.exchange(now);
    if (was != now && (was <= 0 || now == 0))
        spdlog::info("redis: the master has {} replicas{}", now,
                     now == 0 ? ": settlements are written without waiting for one" : "");
}

}  // namespace tokengate::redis
