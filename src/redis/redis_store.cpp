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
    }
    return "error";
}

bool is_noscript(const Result& r) {
    return r.error == CallError::none && r.reply.is_error() && r.reply.str.rfind("NOSCRIPT", 0) == 0;
}

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

struct RedisStore::Client {
    net::any_io_executor ex;
    std::vector<std::shared_ptr<Connection>> connections;
    std::string sha;  // of the script, as this thread's connections loaded it
    std::deque<std::vector<std::string>> retry;
    // Settlements waiting for the next batch (SPEC §18: one call every flush_interval).
    std::vector<std::vector<std::string>> unsent;
    std::optional<net::steady_timer> flush_timer;
    bool flush_armed = false;
    bool batch_in_flight = false;
    // mode sentinel: batches and their WAIT, which blocks its connection, away from decisions.
    std::shared_ptr<Connection> settler;
};

RedisStore::RedisStore(StoreOptions options, const core::Clock& clock, StoreEvents events)
    : options_(std::move(options)),
      clock_(clock),
      endpoint_(parse_url(options_.config.url)),
      replica_id_(random_replica_id()),
      local_(clock),
      breaker_(clock, options_.failures_to_open, options_.breaker_cooldown,
               [this](bool open) {
                   if (events_.breaker) events_.breaker(open);
                   if (open)
                       spdlog::warn("redis circuit breaker open: skipping Redis, probing every {} ms",
                                    options_.breaker_cooldown / 1'000'000);
                   else spdlog::info("redis circuit breaker closed: shared limits resume");
               }),
      id_(++g_store_ids),
      leases_(options_.leases ? std::optional<LeaseBook>(std::in_place, options_.leases->fraction,
                                                         options_.leases->min_period, clock)
                              : std::nullopt),
      events_(std::move(events)) {}

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

void RedisStore::attach(net::any_io_executor ex, unsigned connections) {
    auto client = std::make_unique<Client>();
    client->ex = ex;
    client->flush_timer.emplace(ex);
    auto handshake = login_commands(options_, endpoint_);
    // A master the sentinels named may have been demoted since: ROLE tells before any call.
    if (options_.sentinels) handshake.push_back({"ROLE"});
    handshake.push_back({"SCRIPT", "LOAD", std::string(limiter_script())});
    auto* raw = client.get();
    for (unsigned i = 0; i < std::max(1u, connections); ++i)
        client->connections.push_back(open_connection(*raw, handshake, true));
    if (options_.sentinels) client->settler = open_connection(*raw, handshake, false);
    {
        std::lock_guard lock(clients_mutex_);
        clients_.push_back(std::move(client));
    }
    // Binds on the loop's own thread: calls made there find this client without a lock.
    net::post(ex, [this, raw] {
        t_clients.emplace_back(id_, raw);
        for (auto& c : raw->connections) {
            if (options_.sentinels) options_.sentinels->follow(c);
            else c->start();
        }
        if (raw->settler) options_.sentinels->follow(raw->settler);
        net::co_spawn(raw->ex, retry_loop(*raw), net::detached);
    });
}

std::shared_ptr<Connection> RedisStore::open_connection(Client& client,
                                                        const std::vector<std::vector<std::string>>& handshake,
                                                        bool counts_as_ready) {
    auto* raw = &client;
    auto connection = std::make_shared<Connection>(
        client.ex, endpoint_, handshake,
        [this, raw, counts_as_ready](bool ready, const std::vector<Reply>& replies) {
            if (ready && !replies.empty() && replies.back().type == Reply::Type::string) raw->sha = replies.back().str;
            if (ready) breaker_.probe_now();
            else if (options_.sentinels) options_.sentinels->ask_again();
            if (!counts_as_ready) return;
            if (ready) ++ready_connections_;
            else --ready_connections_;
        },
        options_.tls);
    if (options_.sentinels)
        connection->set_vetting([this, role_index = handshake.size() - 2](const std::vector<Reply>& replies) {
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
    std::lock_guard lock(clients_mutex_);
    for (auto& c : clients_) {
        for (auto& conn : c->connections) conn->stop();
        c->connections.clear();
        if (c->settler) c->settler->stop();
        // Asio objects must go before their event loop does, and the loops are destroyed
        // before the store (nothing sends after stopping_: settlements wait in the retry queue).
        c->settler.reset();
        c->flush_timer.reset();
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
    return c &&
           std::any_of(c->connections.begin(), c->connections.end(), [](const auto& conn) { return conn->ready(); });
}

Connection* RedisStore::pick(Client& c) {
    // Fill one connection before using the next: commands written together are read and
    // answered together, so a busy loop costs Redis one syscall for many calls.
    constexpr std::size_t k_batch = 32;
    Connection* least = nullptr;
    for (auto& conn : c.connections) {
        if (!conn->ready()) continue;
        if (conn->pending() < k_batch) return conn.get();
        if (!least || conn->pending() < least->pending()) least = conn.get();
    }
    return least;
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
    std::snprintf(buf, sizeof buf, ".%llx", static_cast<unsigned long long>(n));
    return replica_id_ + buf;
}

net::awaitable<Result> RedisStore::call(Client& c, std::vector<std::string> args) {
    if (c.sha.empty()) as_eval(args);
    else args[1] = c.sha;
    for (int attempt = 0; attempt < 2; ++attempt) {
        auto* conn = pick(c);
        if (!conn) co_return Result{CallError::unavailable, {}};
        // An attempt after NOSCRIPT gets its own timeout.
        auto result = co_await round_trip(*conn, args, std::chrono::nanoseconds(options_.config.timeout));
        if (is_noscript(result) && args[0] == "EVALSHA") {
            // SCRIPT FLUSH or a restarted Redis: send the text once, which loads it again.
            count_call("noscript");
            as_eval(args);
            continue;
        }
        co_return result;
    }
    co_return Result{CallError::unavailable, {}};
}

void RedisStore::note_success() {
    count_call("ok");
    if (!healthy_.load(std::memory_order_relaxed) && !healthy_.exchange(true))
        spdlog::info("redis answers again: limits are shared across replicas again");
}

void RedisStore::note_failure(CallError error) {
    count_call(error_name(error));
    if (healthy_.load(std::memory_order_relaxed) && healthy_.exchange(false)) {
        auto divisor = std::max(1u, live_replicas());
        local_.clear();
        local_.set_share_divisor(divisor);
        spdlog::warn("redis unavailable ({}): on_error {} applies{}", error_name(error),
                     policy_name(options_.config.on_error),
                     options_.config.on_error == config::OnStoreError::local
                         ? fmt::format(", each limit ÷ {} live replicas, decided in this process", divisor)
                         : std::string());
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
    if (!client || stopping_.load() || !breaker_.allow()) {
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
    auto r = co_await call(client, lease_call("", options_.config.prefix, want, least, script_now_us()).args);
    --renewals_in_flight_;
    auto answer = r.ok() ? parse_lease(r.reply) : std::nullopt;
    if (!answer) {
        leases_->granted(want, 0, std::nan(""));
        breaker_.record(false);
        note_failure(r.error);
        co_return -1;
    }
    breaker_.record(true);
    note_success();
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
        auto marker = options_.config.prefix + "settled:" + next_lease();
        submit(lease_return_call("", options_.config.prefix, unused.charge, marker, script_now_us()).args);
    }
}

net::awaitable<std::optional<Decision>> RedisStore::ask_redis(Client& client, std::span<const Charge> charges,
                                                              bool commit) {
    auto lease = commit ? next_lease() : std::string();
    auto lease_ms = static_cast<double>(options_.lease) / 1e6;
    auto unix_now = quota_now();
    auto windows = quota_windows(charges, unix_now);
    auto r = co_await call(client, decide_call("", options_.config.prefix, charges, windows, unix_now, commit, lease,
                                               lease_ms, script_now_us())
                                       .args);
    if (r.ok()) {
        std::string error;
        if (auto d = parse_decision(r.reply, charges, error)) {
            for (std::size_t i = 0; i < charges.size(); ++i) d->statuses[i].window = windows[i];
            breaker_.record(true);
            note_success();
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
    breaker_.record(false);
    note_failure(r.error);
    if (commit && (r.error == CallError::timeout || r.error == CallError::disconnected)) {
        // Sent, and no answer: the script may have run after all. Give back any concurrency
        // slot it took (a release of a lease that does not exist changes nothing).
        std::vector<Charge> slots;
        for (const auto& c : charges)
            if (c.spec->algorithm == config::Algorithm::concurrency) slots.push_back(c);
        if (!slots.empty()) keep_for_retry(client, settle_call("", options_.config.prefix, slots, {}, lease, -1).args);
    }
    co_return std::nullopt;
}

net::awaitable<limiter::ShapeQueue::StartCheck> RedisStore::queue_turn(const Decision& decision, const Charge& charge,
                                                                       std::uint64_t ticket) {
    if (decision.keeper != limiter::Keeper::shared || !charge.spec->ranked)
        co_return store::in_memory::queue_turn(local_, decision, charge, ticket);
    auto* client = client_here();
    // A queue that cannot be asked does not hold the request: it was admitted, it starts.
    limiter::ShapeQueue::StartCheck cannot_ask{false, true, clock_.now()};
    if (!client || stopping_.load() || !breaker_.allow()) co_return cannot_ask;
    auto r = co_await call(
        *client, turn_call("", options_.config.prefix, charge, decision.lease, ticket, false, script_now_us()).args);
    auto now = clock_.now();
    if (r.ok())
        if (auto check = parse_turn(r.reply, now)) {
            breaker_.record(true);
            note_success();
            check->wait_until = std::min(check->wait_until, now + k_turn_poll);
            co_return *check;
        }
    if (r.ok()) spdlog::error("redis script: unexpected reply to a queue turn");
    breaker_.record(false);
    note_failure(r.error);
    co_return cannot_ask;
}

net::awaitable<void> RedisStore::queue_leave(const Decision& decision, const Charge& charge, std::uint64_t ticket) {
    if (decision.keeper != limiter::Keeper::shared || !charge.spec->ranked) {
        store::in_memory::queue_leave(local_, decision, charge, ticket);
        co_return;
    }
    // Not waited for: a place nobody asks about is dropped by Redis within 5 s anyway.
    if (auto* client = client_here(); client && !stopping_.load())
        co_await call(
            *client, turn_call("", options_.config.prefix, charge, decision.lease, ticket, true, script_now_us()).args);
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
    auto r = co_await call(*client, quota_call("", options_.config.prefix, charge, window, unix_now, add, reset).args);
    if (!r.ok()) co_return std::nullopt;
    auto state = parse_quota(r.reply);
    if (state) state->window = window;
    co_return state;
}

void RedisStore::settle(const Decision& decision, std::span<const Charge> charged, const config::Amounts& actual) {
    if (decision.keeper == limiter::Keeper::memory) return local_.settle(charged, actual, decision.lease);
    if (decision.keeper != limiter::Keeper::shared) return;
    if (!leases_)
        return submit(settle_call("", options_.config.prefix, charged, actual, decision.lease, script_now_us()).args);
    config::Charges in_redis;
    for (const auto& c : charged) {
        if (!LeaseBook::leased(c)) in_redis.push_back(c);
        else if (limiter::settles(c, actual)) leases_->settle(c, actual.in(c.spec->unit) - c.amount);
    }
    submit(settle_call("", options_.config.prefix, in_redis, actual, decision.lease, script_now_us()).args);
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
    if (breaker_.open() || stopping_.load()) {
        keep_for_retry(c, std::move(args));
        return;
    }
    ++settlements_in_flight_;
    c.unsent.push_back(std::move(args));
    auto interval = options_.config.flush_interval;
    if (interval <= 0 || c.unsent.size() >= k_batch_max) return flush_settlements(c);
    if (c.flush_armed) return;
    c.flush_armed = true;
    c.flush_timer->expires_after(std::chrono::nanoseconds(interval));
    c.flush_timer->async_wait([this, &c](boost::system::error_code ec) {
        c.flush_armed = false;
        if (!ec) flush_settlements(c);
    });
}

struct RedisStore::SettleBatch {
    std::vector<std::vector<std::string>> settlements;
    Result applied;
    bool waits_for_replica = false;
    bool as_text = false;  // EVAL: the server had lost the script (NOSCRIPT)
};

void RedisStore::flush_settlements(Client& c) {
    // WAIT holds the settler until its batch is confirmed: one batch at a time there.
    if ((c.settler && c.batch_in_flight) || c.unsent.empty()) return;
    auto* conn = breaker_.open() ? nullptr : c.settler ? (c.settler->ready() ? c.settler.get() : nullptr) : pick(c);
    if (!conn) {
        for (auto& args : c.unsent) {
            --settlements_in_flight_;
            keep_for_retry(c, std::move(args));
        }
        c.unsent.clear();
        return;
    }
    auto batch = std::make_shared<SettleBatch>();
    auto n = std::min(c.unsent.size(), k_batch_max);
    batch->settlements.assign(std::make_move_iterator(c.unsent.begin()),
                              std::make_move_iterator(c.unsent.begin() + static_cast<std::ptrdiff_t>(n)));
    c.unsent.erase(c.unsent.begin(), c.unsent.begin() + static_cast<std::ptrdiff_t>(n));
    send_batch(c, *conn, std::move(batch));
}

void RedisStore::send_batch(Client& c, Connection& conn, std::shared_ptr<SettleBatch> batch) {
    c.batch_in_flight = true;
    auto args = settle_batch_call(c.sha, batch->settlements).args;
    if (c.sha.empty() || batch->as_text) as_eval(args);
    if (!c.settler) {
        conn.send(args, [this, &c, batch](Result r) {
            batch->applied = std::move(r);
            batch_answered(c, batch, std::nullopt);
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
    conn.send(confirm, [this, &c, batch](Result r) { batch_answered(c, batch, std::move(r)); });
}

void RedisStore::batch_answered(Client& c, const std::shared_ptr<SettleBatch>& batch,
                                std::optional<Result> confirmation) {
    c.batch_in_flight = false;
    const auto& applied = batch->applied;
    if (is_noscript(applied) && !batch->as_text) {
        // SCRIPT FLUSH or a restarted Redis: the text, once, which loads it again.
        count_call("noscript");
        batch->as_text = true;
        auto* conn = c.settler ? c.settler.get() : pick(c);
        if (conn && conn->ready()) return send_batch(c, *conn, batch);
    }
    bool confirmed =
        !confirmation || (confirmation->ok() && (!batch->waits_for_replica || confirmation->reply.integer >= 1));
    if (applied.ok() && confirmed) {
        count_call("ok");
        settlements_in_flight_ -= batch->settlements.size();
    } else {
        // Unanswered, refused, or answered by a master no replica has confirmed yet (one that
        // fell before a replica had them would lose them): each is sent again, to whichever
        // master there is then; the script applies a lease's settlement once.
        if (!applied.ok()) count_call(error_name(applied.error));
        else count_call(confirmation->ok() ? "unreplicated" : error_name(confirmation->error));
        for (auto& args : batch->settlements) {
            --settlements_in_flight_;
            keep_for_retry(c, std::move(args));
        }
    }
    flush_settlements(c);
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
    if (c.retry.empty() || breaker_.open()) return;
    auto waiting = std::move(c.retry);
    c.retry.clear();
    settlements_waiting_ -= waiting.size();
    for (auto& args : waiting) send_settlement(c, std::move(args));
}

net::awaitable<void> RedisStore::retry_loop(Client& c) {
    net::steady_timer timer(c.ex);
    while (!stopping_.load()) {
        timer.expires_after(std::chrono::milliseconds(250));
        auto [ec] = co_await timer.async_wait(k_use);
        if (ec) co_return;
        if (!c.retry.empty() && pick(c)) flush_retries(c);
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
        if (!breaker_.allow()) continue;
        auto r =
            co_await call(c, heartbeat_call("", options_.config.prefix, replica_id_, ttl_ms, script_now_us()).args);
        if (r.ok() && r.reply.type == Reply::Type::integer) {
            auto n = static_cast<unsigned>(std::max<long long>(1, r.reply.integer));
            if (n != live_replicas_.exchange(n)) spdlog::info("redis: {} live replicas share the limits", n);
            if (events_.replicas) events_.replicas(n);
            breaker_.record(true);
            note_success();
            flush_retries(c);
        } else {
            breaker_.record(false);
            note_failure(r.error);
        }
        if (options_.sentinels)
            if (auto* conn = pick(c)) {
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
