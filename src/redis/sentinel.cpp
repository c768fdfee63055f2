#include "tokengate/redis/sentinel.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <stdexcept>

namespace tokengate::redis {

namespace net = boost::asio;

Sentinels::Sentinels(net::any_io_executor ex, std::vector<Endpoint> sentinels, std::string master_name,
                     Endpoint master_template, std::vector<std::vector<std::string>> handshake,
                     std::shared_ptr<tls::ClientContext> tls)
    : ex_(ex), master_name_(std::move(master_name)), master_template_(std::move(master_template)) {
    wake_.emplace(ex);
    // Asks as soon as a sentinel can answer while the master is still unknown (at start).
    auto on_state = [this](bool ready, const std::vector<Reply>&) {
        if (ready && !master() && wake_) wake_->cancel();
    };
    for (auto& endpoint : sentinels)
        sentinels_.push_back(std::make_shared<Connection>(ex, std::move(endpoint), handshake, on_state, tls));
}

void Sentinels::start() {
    for (auto& s : sentinels_) s->start();
    net::co_spawn(
        ex_, [self = shared_from_this()]() { return self->poll_loop(); }, net::detached);
}

void Sentinels::stop() {
    // As RedisStore::stop: the event loops have stopped, so nothing runs beside this, and the
    // Asio objects go now, before their loop is destroyed (this outlives it, in the store).
    stopped_ = true;
    wake_.reset();
    for (auto& s : sentinels_) s->stop();
    sentinels_.clear();
}

void Sentinels::follow(const std::shared_ptr<Connection>& connection) {
    std::lock_guard lock(mutex_);
    followers_.push_back(connection);
    if (master_) net::post(connection->executor(), [connection, to = *master_] { connection->retarget(to); });
}

void Sentinels::ask_again() {
    net::post(ex_, [self = shared_from_this()] {
        if (self->wake_) self->wake_->cancel();
    });
}

std::optional<Endpoint> Sentinels::master() const {
    std::lock_guard lock(mutex_);
    return master_;
}

net::awaitable<void> Sentinels::poll_loop() {
    while (!stopped_) {
        if (auto found = co_await ask()) {
            if (auto known = master(); !known || !known->same_server(*found)) moved(*found);
        }
        if (stopped_) break;
        wake_->expires_after(k_poll);
        co_await wake_->async_wait(net::as_tuple(net::use_awaitable));
    }
}

net::awaitable<std::optional<Endpoint>> Sentinels::ask() {
    static const std::string command[] = {"SENTINEL", "get-master-addr-by-name", ""};
    std::vector<std::string> args(std::begin(command), std::end(command));
    args[2] = master_name_;
    // The first sentinel that knows the name answers (Redis's guide for Sentinel clients).
    for (auto& sentinel : sentinels_) {
        if (!sentinel->ready()) continue;
        auto r = co_await round_trip(*sentinel, args, std::chrono::milliseconds(500));
        const auto& reply = r.reply;
        if (!r.ok() || reply.type != Reply::Type::array || reply.elements.size() != 2) continue;
        const auto& host = reply.elements[0].str;
        try {
            auto where = host.find(':') == std::string::npos ? host : "[" + host + "]";
            co_return master_template_.at(where + ":" + reply.elements[1].str);
        } catch (const std::invalid_argument& e) {
            spdlog::warn("redis sentinel {}:{} named a master that is no address ({})", sentinel->endpoint().host,
                         sentinel->endpoint().port, e.what());
        }
    }
    co_return std::nullopt;
}

void Sentinels::moved(const Endpoint& to) {
    std::vector<std::shared_ptr<Connection>> live;
    {
        std::lock_guard lock(mutex_);
        master_ = to;
        std::erase_if(followers_, [&live](const std::weak_ptr<Connection>& weak) {
            auto strong = weak.lock();
            if (!strong) return true;  // closed
            live.push_back(std::move(strong));
            return false;
        });
    }
    spdlog::info("redis sentinel: the master of {} is {}:{}", master_name_, to.host, to.port);
    for (auto& connection : live) net::post(connection->executor(), [connection, to] { connection->retarget(to); });
}

std::optional<std::size_t> replicas_of_master(const Reply& role) {
    // ["master", offset, [[ip, port, offset], ...]]
    const auto& e = role.elements;
    if (role.type != Reply::Type::array || e.size() < 3 || e[0].str != "master") return std::nullopt;
    return e[2].elements.size();
}

std::function<std::string(const std::vector<Reply>&)> expect_master(std::size_t role_index) {
    return [role_index](const std::vector<Reply>& replies) -> std::string {
        if (role_index >= replies.size()) return "no reply to ROLE";
        const auto& role = replies[role_index];
        if (replicas_of_master(role)) return {};
        auto said = role.type == Reply::Type::array && !role.elements.empty() ? role.elements[0].str : "nothing";
        return "not the master (ROLE says " + said + "): waiting for the sentinels to name the new one";
    };
}

}  // namespace tokengate::redis
