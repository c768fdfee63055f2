#include "tokengate/redis/cluster.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <array>
#include <charconv>
#include <stdexcept>

namespace tokengate::redis {

namespace net = boost::asio;

namespace {

constexpr std::array<std::uint16_t, 256> crc16_table() {
    std::array<std::uint16_t, 256> table{};
    for (unsigned byte = 0; byte < 256; ++byte) {
        auto crc = static_cast<std::uint16_t>(byte << 8);
        for (int bit = 0; bit < 8; ++bit)
            crc = static_cast<std::uint16_t>(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        table[byte] = crc;
    }
    return table;
}

constexpr auto k_crc16 = crc16_table();

std::uint16_t crc16(std::string_view text) {
    std::uint16_t crc = 0;
    for (unsigned char c : text) crc = static_cast<std::uint16_t>((crc << 8) ^ k_crc16[((crc >> 8) ^ c) & 0xff]);
    return crc;
}

std::string host_port(std::string_view host, std::string_view port) {
    std::string where(host);
    if (where.find(':') != std::string::npos) where = "[" + where + "]";
    return where.append(":").append(port);
}

}  // namespace

std::uint16_t key_slot(std::string_view key) {
    auto open = key.find('{');
    if (open != std::string_view::npos) {
        auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
    }
    return static_cast<std::uint16_t>(crc16(key) % k_cluster_slots);
}

std::optional<std::uint16_t> call_slot(std::span<const std::string> args) {
    // EVALSHA sha numkeys key...
    if (args.size() < 4 || args[2] == "0") return std::nullopt;
    return key_slot(args[3]);
}

std::optional<std::vector<SlotRange>> parse_cluster_slots(const Reply& reply, const Endpoint& asked) {
    // [[first, last, [host, port, id, ...], replica...], ...]
    if (reply.type != Reply::Type::array) return std::nullopt;
    std::vector<SlotRange> ranges;
    for (const auto& range : reply.elements) {
        const auto& e = range.elements;
        if (range.type != Reply::Type::array || e.size() < 3 || e[0].type != Reply::Type::integer ||
            e[1].type != Reply::Type::integer || e[2].type != Reply::Type::array || e[2].elements.size() < 2 ||
            e[2].elements[1].type != Reply::Type::integer)
            return std::nullopt;
        SlotRange r;
        auto first = e[0].integer, last = e[1].integer, port = e[2].elements[1].integer;
        if (first < 0 || last < first || last >= static_cast<long long>(k_cluster_slots) || port <= 0 || port > 65535)
            return std::nullopt;
        r.first = static_cast<unsigned>(first);
        r.last = static_cast<unsigned>(last);
        r.host = e[2].elements[0].str.empty() ? asked.host : e[2].elements[0].str;
        r.port = static_cast<unsigned short>(port);
        ranges.push_back(std::move(r));
    }
    return ranges;
}

std::optional<Redirect> parse_redirect(const Reply& reply, const Endpoint& like) {
    if (!reply.is_error()) return std::nullopt;
    std::string_view text = reply.str;
    Redirect r;
    if (text.starts_with("MOVED ")) text.remove_prefix(6);
    else if (text.starts_with("ASK ")) text.remove_prefix(4), r.ask = true;
    else return std::nullopt;
    auto space = text.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    unsigned slot = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + space, slot);
    if (ec != std::errc{} || p != text.data() + space || slot >= k_cluster_slots) return std::nullopt;
    r.slot = static_cast<std::uint16_t>(slot);
    auto where = text.substr(space + 1);
    auto colon = where.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    try {
        r.to = like.at(host_port(where.substr(0, colon), where.substr(colon + 1)));
    } catch (const std::invalid_argument&) {
        return std::nullopt;
    }
    return r;
}

Cluster::Cluster(net::any_io_executor ex, std::vector<Endpoint> seeds, std::vector<std::vector<std::string>> handshake,
                 std::shared_ptr<tls::ClientContext> tls)
    : ex_(ex), seeds_(std::move(seeds)), handshake_(std::move(handshake)), tls_(std::move(tls)) {
    wake_.emplace(ex);
    auto empty = std::make_shared<Map>();
    empty->owner.assign(k_cluster_slots, -1);
    map_ = std::move(empty);
}

void Cluster::start() {
    net::post(ex_, [self = shared_from_this()] {
        for (const auto& seed : self->seeds_) self->asker_for(seed);
        net::co_spawn(
            self->ex_, [self]() { return self->poll_loop(); }, net::detached);
    });
}

void Cluster::stop() {
    // As RedisStore::stop: nothing runs beside this, and the Asio objects go before their loop.
    stopped_ = true;
    wake_.reset();
    for (auto& a : askers_) a->stop();
    askers_.clear();
}

std::shared_ptr<const Cluster::Map> Cluster::map() const {
    std::lock_guard lock(mutex_);
    return map_;
}

std::shared_ptr<Connection> Cluster::asker_for(const Endpoint& node) {
    for (auto& a : askers_)
        if (a->endpoint().same_server(node)) return a;
    // Asks as soon as one can answer while no slot is known yet (at start).
    auto on_state = [this](bool ready, const std::vector<Reply>&) {
        if (ready && wake_ && map()->owner[0] < 0) wake_->cancel();
    };
    auto asker = std::make_shared<Connection>(ex_, node, handshake_, on_state, tls_);
    asker->start();
    askers_.push_back(asker);
    return asker;
}

void Cluster::ask_again() {
    net::post(ex_, [self = shared_from_this()] {
        if (self->wake_) self->wake_->cancel();
    });
}

net::awaitable<void> Cluster::poll_loop() {
    while (!stopped_) {
        co_await ask();
        if (stopped_) break;
        wake_->expires_after(k_poll);
        co_await wake_->async_wait(net::as_tuple(net::use_awaitable));
    }
}

net::awaitable<bool> Cluster::ask() {
    static const std::string command[] = {"CLUSTER", "SLOTS"};
    // Any node knows the whole map; the first that answers is asked (the masters learnt are
    // asked too, so the seeds may go).
    for (std::size_t i = 0; i < askers_.size(); ++i) {
        auto asker = askers_[i];
        if (!asker->ready()) continue;
        auto r = co_await round_trip(*asker, command, std::chrono::milliseconds(500));
        if (stopped_) co_return false;
        auto ranges = r.ok() ? parse_cluster_slots(r.reply, asker->endpoint()) : std::nullopt;
        if (!ranges) continue;
        std::vector<std::pair<const SlotRange*, Endpoint>> masters;
        for (const auto& range : *ranges) try {
                masters.emplace_back(&range, asker->endpoint().at(host_port(range.host, std::to_string(range.port))));
            } catch (const std::invalid_argument&) {
                spdlog::warn("redis cluster: {}:{} named a master that is no address", asker->endpoint().host,
                             asker->endpoint().port);
            }
        change([&](Map& map) {
            map.owner.assign(k_cluster_slots, -1);
            for (const auto& [range, node] : masters) {
                auto index = static_cast<std::int32_t>(add_node(map, node));
                for (auto slot = range->first; slot <= range->last; ++slot) map.owner[slot] = index;
            }
        });
        co_return true;
    }
    co_return false;
}

std::size_t Cluster::add_node(Map& map, const Endpoint& node) {
    for (std::size_t i = 0; i < map.nodes.size(); ++i)
        if (map.nodes[i].same_server(node)) return i;
    map.nodes.push_back(node);
    return map.nodes.size() - 1;
}

std::size_t Cluster::index_of(const Endpoint& node) {
    std::size_t index = 0;
    change([&](Map& map) { index = add_node(map, node); });
    return index;
}

std::size_t Cluster::moved(std::uint16_t slot, const Endpoint& to) {
    std::size_t index = 0;
    change([&](Map& map) {
        index = add_node(map, to);
        map.owner[slot] = static_cast<std::int32_t>(index);
    });
    ask_again();
    return index;
}

void Cluster::follow(const std::shared_ptr<Connection>& connection, std::uint16_t slot) {
    std::lock_guard lock(mutex_);
    followers_.emplace_back(connection, slot);
    if (auto owner = map_->owner[slot]; owner >= 0)
        net::post(connection->executor(),
                  [connection, to = map_->nodes[static_cast<std::size_t>(owner)]] { connection->retarget(to); });
}

void Cluster::change(const std::function<void(Map&)>& edit) {
    std::vector<std::pair<std::shared_ptr<Connection>, Endpoint>> moves;
    std::shared_ptr<const Map> now;
    {
        // Built from the newest map under the lock: an index handed out is never given to
        // another node by a change made from an older copy.
        std::lock_guard lock(mutex_);
        auto next = std::make_shared<Map>(*map_);
        edit(*next);
        if (next->owner == map_->owner && next->nodes.size() == map_->nodes.size()) return;
        std::erase_if(followers_, [&](const auto& follower) {
            auto strong = follower.first.lock();
            if (!strong) return true;  // closed
            auto owner = next->owner[follower.second];
            if (owner >= 0 && owner != map_->owner[follower.second])
                moves.emplace_back(std::move(strong), next->nodes[static_cast<std::size_t>(owner)]);
            return false;
        });
        map_ = next;
        now = next;
    }
    for (auto& [connection, to] : moves)
        net::post(connection->executor(), [connection, to] { connection->retarget(to); });
    net::post(ex_, [self = shared_from_this(), now] {
        if (self->stopped_) return;
        for (const auto& node : now->nodes) self->asker_for(node);
        if (self->on_change_) self->on_change_(*now);
    });
}

}  // namespace tokengate::redis
