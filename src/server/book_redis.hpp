#pragma once

// Internal to the server module: the run-time book kept in Redis (store.backend: redis), so
// every replica sees a key or tenant another made or removed (SPEC §21).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <memory>

#include "run_time_book.hpp"
#include "tokengate/redis/connection.hpp"
#include "tokengate/redis/redis_store.hpp"

namespace tokengate::server {

/// One hash of keys and one of tenants (JSON records by id), a counter every change bumps, and
/// a hash of when each key was last used, under `<prefix>{auth}:` (one slot, for a cluster).
/// Each change is one script, atomic with its bump. Its own connection lives on one event
/// loop: keep() and watch() must run there.
class RedisKeeper final : public BookKeeper {
public:
    RedisKeeper(boost::asio::any_io_executor ex, const redis::StoreOptions& options);
    ~RedisKeeper() override;

    boost::asio::awaitable<std::string> keep(const BookChange& change, const BookContents& after) override;
    /// Reads the book into `book` at start and whenever the counter moves, asking every
    /// `poll`; every `usage_every` it also writes when this replica last used each key and
    /// reads when the others did. Until stop().
    boost::asio::awaitable<void> watch(std::shared_ptr<RunTimeBook> book, core::Nanos poll, core::Nanos usage_every);
    void stop() override;

    /// How long a call may take: admin calls are not on the request path, so more than the limiter's.
    static constexpr std::chrono::seconds k_timeout{2};

private:
    /// Whether the connection is ready, waiting up to k_timeout for it.
    boost::asio::awaitable<bool> ready();
    boost::asio::awaitable<bool> read_book(RunTimeBook& book);
    boost::asio::awaitable<void> share_usage(RunTimeBook& book);
    std::string key(std::string_view name) const { return prefix_ + "{auth}:" + std::string(name); }

    std::string prefix_;
    std::shared_ptr<redis::Connection> connection_;
    std::shared_ptr<redis::Sentinels> sentinels_;  // mode sentinel: the store's (stopping twice is harmless)
    long long version_seen_ = -1;
    long long version_written_ = 0;  // the counter after this replica's last change
    bool stopped_ = false;
};

}  // namespace tokengate::server
