#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/redis/connection.hpp"

namespace tokengate::redis {

constexpr std::size_t k_cluster_slots = 16384;

/// The slot Redis Cluster keeps `key` in: CRC16 (XMODEM) of its hash tag (the text between the
/// first '{' and the next '}', when not empty), else of the whole key, mod 16384.
std::uint16_t key_slot(std::string_view key);

/// The slot an EVALSHA/EVAL's arguments are routed by (its first key's), if it declares one.
std::optional<std::uint16_t> call_slot(std::span<const std::string> args);

/// One range of CLUSTER SLOTS' reply: [first, last] served by the master at host:port.
struct SlotRange {
    unsigned first = 0;
    unsigned last = 0;
    std::string host;
    unsigned short port = 0;
};
/// CLUSTER SLOTS' reply; a master named by an empty host is `asked`'s host. Nothing if malformed.
std::optional<std::vector<SlotRange>> parse_cluster_slots(const Reply& reply, const Endpoint& asked);

/// A redirection from a cluster node: `MOVED <slot> <host:port>` or `ASK <slot> <host:port>`.
struct Redirect {
    bool ask = false;  // ASK: this call only, after ASKING; MOVED: the slot lives there now
    std::uint16_t slot = 0;
    Endpoint to;
};
std::optional<Redirect> parse_redirect(const Reply& reply, const Endpoint& like);

/// store.redis.mode: cluster (SPEC §18). Knows which master serves each slot: asks the nodes
/// CLUSTER SLOTS at start, every k_poll, and at once when told a slot moved. Every master ever
/// seen keeps its index for good (a store keeps per-node connections and breakers by it). Lives
/// on one event loop; every public member may be called from any thread.
class Cluster : public std::enable_shared_from_this<Cluster> {
public:
    struct Map {
        std::vector<Endpoint> nodes;      // by lasting index
        std::vector<std::int32_t> owner;  // per slot: the index of its master, -1 if unserved
        std::int32_t node_of(std::uint16_t slot) const { return owner[slot]; }
    };
    using ChangeHandler = std::function<void(const Map&)>;

    /// `seeds`: where to ask first (store.redis.nodes); `handshake`: what each connection
    /// sends first (AUTH).
    Cluster(boost::asio::any_io_executor ex, std::vector<Endpoint> seeds,
            std::vector<std::vector<std::string>> handshake, std::shared_ptr<tls::ClientContext> tls);
    /// Hears every new map, on the cluster's loop; set before start().
    void on_change(ChangeHandler handler) { on_change_ = std::move(handler); }
    void start();
    /// Once the event loops have stopped (as RedisStore::stop).
    void stop();
    std::shared_ptr<const Map> map() const;
    /// MOVED: `slot` is served by `to` from now on. The map says so at once, and is asked for
    /// again whole (a resharding moves many slots). The node's index.
    std::size_t moved(std::uint16_t slot, const Endpoint& to);
    /// The lasting index of `node` (an ASK's target), which the map learns if it is new.
    std::size_t index_of(const Endpoint& node);
    void ask_again();
    /// From now on `connection` connects to whichever master serves `slot`.
    void follow(const std::shared_ptr<Connection>& connection, std::uint16_t slot);

    static constexpr std::chrono::milliseconds k_poll{1000};

private:
    boost::asio::awaitable<void> poll_loop();
    boost::asio::awaitable<bool> ask();
    std::shared_ptr<Connection> asker_for(const Endpoint& node);
    static std::size_t add_node(Map& map, const Endpoint& node);
    /// Applies `edit` to a copy of the newest map and makes it the map, if it changed anything.
    void change(const std::function<void(Map&)>& edit);

    boost::asio::any_io_executor ex_;
    std::vector<Endpoint> seeds_;
    std::vector<std::vector<std::string>> handshake_;
    std::shared_ptr<tls::ClientContext> tls_;
    std::vector<std::shared_ptr<Connection>> askers_;  // on the loop only
    std::optional<boost::asio::steady_timer> wake_;    // reset by stop()
    bool stopped_ = false;
    ChangeHandler on_change_;

    mutable std::mutex mutex_;
    std::shared_ptr<const Map> map_;
    std::vector<std::pair<std::weak_ptr<Connection>, std::uint16_t>> followers_;
};

}  // namespace tokengate::redis
