#include "book_redis.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <charconv>
#include <nlohmann/json.hpp>

namespace tokengate::server {

namespace net = boost::asio;
using nlohmann::json;

namespace {

/// KEYS: the keys hash, the tenants hash, the counter, the usage hash. ARGV: the change, the
/// id, the record. A tenant's removal revokes every key of it, made on whichever replica.
/// Answers the counter after the change, or -1 when the tenant was made elsewhere first.
constexpr std::string_view k_change_script = R"lua(
local change, id = ARGV[1], ARGV[2]
if change == 'make_key' then
  redis.call('HSET', KEYS[1], id, ARGV[3])
elseif change == 'revoke_key' then
  redis.call('HDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[4], id)
elseif change == 'make_tenant' then
  if redis.call('HSETNX', KEYS[2], id, ARGV[3]) == 0 then return -1 end
elseif change == 'remove_tenant' then
  redis.call('HDEL', KEYS[2], id)
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local ok, key = pcall(cjson.decode, all[i + 1])
    if ok and type(key) == 'table' and key.tenant == id then
      redis.call('HDEL', KEYS[1], all[i])
      redis.call('HDEL', KEYS[4], all[i])
    end
  end
end
return redis.call('INCR', KEYS[3])
)lua";

/// KEYS: the keys hash, the usage hash. ARGV: key id, when (ns), ... Records a use only for a
/// key still there, and only if later than the one recorded: replicas report in any order.
constexpr std::string_view k_usage_script = R"lua(
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    local was = tonumber(redis.call('HGET', KEYS[2], ARGV[i]) or '0') or 0
    if tonumber(ARGV[i + 1]) > was then redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
  end
end
return 0
)lua";

/// KEYS: the counter, the keys hash, the tenants hash, the usage hash. The counter and the book
/// read at one instant, so a read can be told from one older than a change made here.
constexpr std::string_view k_read_script = R"lua(
return { redis.call('GET', KEYS[1]) or '0', redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3]),
         redis.call('HGETALL', KEYS[4]) }
)lua";

long long number_of(const std::string& text) {
    long long n = 0;  // none yet: nothing was ever made
    std::from_chars(text.data(), text.data() + text.size(), n);
    return n;
}

std::string_view change_name(BookChange::Kind kind) {
    switch (kind) {
        case BookChange::Kind::make_key: return "make_key";
        case BookChange::Kind::revoke_key: return "revoke_key";
        case BookChange::Kind::make_tenant: return "make_tenant";
        case BookChange::Kind::remove_tenant: return "remove_tenant";
    }
    return "";
}

std::string why_not(const redis::Result& r) {
    switch (r.error) {
        case redis::CallError::none: return "Redis answered: " + r.reply.str.substr(0, 200);
        case redis::CallError::timeout: return "Redis did not answer in time";
        default: return "Redis is unavailable";
    }
}

}  // namespace

RedisKeeper::RedisKeeper(net::any_io_executor ex, const redis::StoreOptions& options) : prefix_(options.config.prefix) {
    auto endpoint = redis::Endpoint::parse(options.config.url);
    auto handshake = redis::login_commands(options, endpoint);
    if (options.sentinels) handshake.push_back({"ROLE"});
    connection_ = std::make_shared<redis::Connection>(
        ex, endpoint, handshake, [](bool, const std::vector<redis::Reply>&) {}, options.tls);
    if (options.sentinels) {
        connection_->set_vetting(redis::expect_master(handshake.size() - 1));
        options.sentinels->follow(connection_);
        sentinels_ = options.sentinels;
    } else if (options.cluster) {
        // The book's keys share one hash tag: one slot, on whichever master serves it.
        options.cluster->follow(connection_, redis::key_slot(key("version")));
    } else {
        connection_->start();
    }
}

RedisKeeper::~RedisKeeper() { stop(); }

void RedisKeeper::stop() {
    if (stopped_) return;
    stopped_ = true;
    connection_->stop();
    // The event loops have stopped and are destroyed before this keeper: the connection's
    // Asio objects must go now (nothing runs that could use it).
    connection_.reset();
    if (sentinels_) sentinels_->stop();
}

net::awaitable<bool> RedisKeeper::ready() {
    // Just started, or reconnecting: worth a short wait before an admin call is refused.
    net::steady_timer timer(co_await net::this_coro::executor);
    constexpr auto k_step = std::chrono::milliseconds(10);
    for (std::chrono::milliseconds waited{0}; !connection_->ready() && !stopped_ && waited < k_timeout;
         waited += k_step) {
        timer.expires_after(k_step);
        co_await timer.async_wait(net::as_tuple(net::use_awaitable));
    }
    co_return connection_->ready();
}

net::awaitable<std::string> RedisKeeper::keep(const BookChange& change, const BookContents&) {
    if (!co_await ready()) co_return "Redis is unavailable";
    std::vector<std::string> args{"EVAL",
                                  std::string(k_change_script),
                                  "4",
                                  key("keys"),
                                  key("tenants"),
                                  key("version"),
                                  key("last_used"),
                                  std::string(change_name(change.kind)),
                                  change.id,
                                  change.record};
    auto r = co_await redis::round_trip(*connection_, args, k_timeout);
    if (!r.ok() || r.reply.type != redis::Reply::Type::integer) co_return why_not(r);
    if (r.reply.integer < 0) co_return std::string(k_made_elsewhere);
    version_written_ = std::max(version_written_, r.reply.integer);
    co_return "";
}

net::awaitable<bool> RedisKeeper::read_book(RunTimeBook& book) {
    std::vector<std::string> get{"GET", key("version")};
    auto version = co_await redis::round_trip(*connection_, get, k_timeout);
    if (!version.ok()) co_return false;
    long long seen = version.reply.type == redis::Reply::Type::string ? number_of(version.reply.str) : 0;
    if (seen == version_seen_) co_return true;
    std::vector<std::string> read{
        "EVAL", std::string(k_read_script), "4", key("version"), key("keys"), key("tenants"), key("last_used")};
    auto all = co_await redis::round_trip(*connection_, read, k_timeout);
    if (!all.ok() || all.reply.elements.size() != 4) co_return false;
    seen = number_of(all.reply.elements[0].str);
    if (seen < version_written_) {
        // Read before a change this replica made and holds already (one connection answers in
        // order): not taken. The next poll's read comes after it. (Cleared, not kept: a Redis
        // flushed since counts from 0 again.)
        version_written_ = 0;
        co_return true;
    }
    const auto& k = all.reply.elements[1];
    const auto& t = all.reply.elements[2];
    const auto& u = all.reply.elements[3];
    std::unordered_map<std::string_view, core::Nanos> last_used;
    for (std::size_t i = 0; i + 1 < u.elements.size(); i += 2) {
        core::Nanos at = 0;
        const auto& text = u.elements[i + 1].str;
        std::from_chars(text.data(), text.data() + text.size(), at);
        last_used.emplace(u.elements[i].str, at);
    }
    BookContents contents;
    std::size_t unreadable = 0;
    // A record is a few hundred bytes: a larger one is not parsed, so that no value written there
    // (a megabyte of '[') holds up this event loop.
    constexpr std::size_t k_max_record_bytes = 4096;
    auto record = [&](const std::string& text) {
        return text.size() > k_max_record_bytes ? json() : json::parse(text, nullptr, false);
    };
    for (std::size_t i = 0; i + 1 < k.elements.size(); i += 2) {
        auto key = key_from_record(record(k.elements[i + 1].str));
        if (!key) {
            ++unreadable;
            continue;
        }
        if (auto it = last_used.find(key->id); it != last_used.end())
            key->last_used = std::max(key->last_used, it->second);
        contents.keys.push_back(std::move(*key));
    }
    for (std::size_t i = 0; i + 1 < t.elements.size(); i += 2) {
        auto tenant = tenant_from_record(record(t.elements[i + 1].str));
        if (tenant) contents.tenants.push_back(std::move(*tenant));
        else ++unreadable;
    }
    if (unreadable) spdlog::warn("run-time book in Redis: {} entries are not keys or tenants; left out", unreadable);
    book.replace(std::move(contents));
    version_seen_ = seen;
    co_return true;
}

net::awaitable<void> RedisKeeper::share_usage(RunTimeBook& book) {
    auto used = book.take_recently_used();
    if (used.empty()) co_return;
    std::vector<std::string> args{"EVAL", std::string(k_usage_script), "2", key("keys"), key("last_used")};
    for (const auto& [id, at] : used) {
        args.push_back(id);
        args.push_back(std::to_string(at));
    }
    auto r = co_await redis::round_trip(*connection_, args, k_timeout);
    // Not shared: the others learn of these uses only when the key is used here again.
    if (!r.ok()) spdlog::debug("run-time book: when keys were last used not shared: {}", why_not(r));
}

net::awaitable<void> RedisKeeper::watch(std::shared_ptr<RunTimeBook> book, core::Nanos poll, core::Nanos usage_every) {
    net::steady_timer timer(co_await net::this_coro::executor);
    co_await ready();  // the first read as soon as Redis answers, not a poll later
    bool failing = false;
    core::Nanos since_usage = 0;
    while (!stopped_) {
        if (connection_->ready()) {
            bool read = co_await read_book(*book);
            if (read && failing) spdlog::info("run-time book: read from Redis again");
            if (!read && !failing)
                spdlog::warn("run-time book: cannot read it from Redis; the keys known here stay in force");
            failing = !read;
            if ((since_usage += poll) >= usage_every) {
                since_usage = 0;
                co_await share_usage(*book);
                version_seen_ = -1;  // and read everyone's at the next poll
            }
        }
        timer.expires_after(std::chrono::nanoseconds(poll));
        co_await timer.async_wait(net::as_tuple(net::use_awaitable));
    }
}

}  // namespace tokengate::server
