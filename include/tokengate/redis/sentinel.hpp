#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tokengate/redis/connection.hpp"

namespace tokengate::redis {

/// store.redis.mode: sentinel (SPEC §18). Asks the sentinels which server is the master they
/// monitor under `master_name`, every k_poll and at once when asked to, and moves every
/// connection that follows it when the answer changes. Lives on one event loop; follow(),
/// ask_again() and master() may be called from any thread.
class Sentinels : public std::enable_shared_from_this<Sentinels> {
public:
    /// `master_template`: the master's scheme (rediss://) and db; `handshake`: what each
    /// sentinel connection sends first (AUTH).
    Sentinels(boost::asio::any_io_executor ex, std::vector<Endpoint> sentinels, std::string master_name,
              Endpoint master_template, std::vector<std::vector<std::string>> handshake,
              std::shared_ptr<tls::ClientContext> tls);
    void start();
    /// Once the event loops have stopped (as RedisStore::stop).
    void stop();
    /// From now on `connection` connects wherever the master is (on its own event loop); it
    /// starts once the master is known.
    void follow(const std::shared_ptr<Connection>& connection);
    /// Asks the sentinels again now: a follower lost its server, or found a replica there.
    void ask_again();
    std::optional<Endpoint> master() const;
    const std::string& master_name() const { return master_name_; }

    static constexpr std::chrono::milliseconds k_poll{250};

private:
    boost::asio::awaitable<void> poll_loop();
    boost::asio::awaitable<std::optional<Endpoint>> ask();
    void moved(const Endpoint& to);

    boost::asio::any_io_executor ex_;
    std::string master_name_;
    Endpoint master_template_;
    std::vector<std::shared_ptr<Connection>> sentinels_;
    std::optional<boost::asio::steady_timer> wake_;  // reset by stop()
    bool stopped_ = false;

    mutable std::mutex mutex_;
    std::optional<Endpoint> master_;
    std::vector<std::weak_ptr<Connection>> followers_;
};

/// A handshake vet (Connection::set_vetting) for a master: the reply at `role_index` is ROLE's,
/// and it must say master (a server the sentinels just demoted says slave).
std::function<std::string(const std::vector<Reply>&)> expect_master(std::size_t role_index);

/// How many replicas a master's ROLE reply lists; nothing if the reply is not a master's.
std::optional<std::size_t> replicas_of_master(const Reply& role);

}  // namespace tokengate::redis
