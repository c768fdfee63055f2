#include "tokengate/proxy/origin.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/beast/core/error.hpp>

#include <cctype>
#include <cstdint>
#include <random>

#include "tokengate/core/sha256.hpp"

namespace tokengate::proxy {

namespace net = boost::asio;

std::string address_text(const net::ip::address& a) {
    if (a.is_v6() && a.to_v6().is_v4_mapped())
        return net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6()).to_string();
    return a.to_string();
}

bool is_trusted_proxy(const std::vector<core::Cidr>& proxies, std::string_view address) {
    if (proxies.empty()) return false;  // the default: no address to parse on every request
    auto ip = core::parse_ip(address);
    if (!ip) return false;
    for (const auto& c : proxies)
        if (c.contains(*ip)) return true;
    return false;
}

std::string client_address(const std::vector<core::Cidr>& trusted_proxies, const std::string& peer,
                           std::string_view forwarded_for) {
    if (forwarded_for.empty() || !is_trusted_proxy(trusted_proxies, peer)) return peer;
    std::string_view rest = forwarded_for;
    std::string last;
    while (!rest.empty()) {
        auto comma = rest.rfind(',');
        auto hop = comma == std::string_view::npos ? rest : rest.substr(comma + 1);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(0, comma);
        while (!hop.empty() && hop.front() == ' ') hop.remove_prefix(1);
        while (!hop.empty() && hop.back() == ' ') hop.remove_suffix(1);
        // One spelling per address, so ::ffff:1.2.3.4 and 1.2.3.4 share one ip bucket.
        boost::system::error_code ec;
        auto address = net::ip::make_address(std::string(hop), ec);
        if (ec) break;
        last = address_text(address);
        if (!is_trusted_proxy(trusted_proxies, last)) return last;
    }
    return last.empty() ? peer : last;
}

namespace {

core::RecycledString new_request_id() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uint64_t parts[2] = {rng(), rng()};
    core::RecycledString id;
    id.reserve(2 * sizeof parts);
    core::append_hex(id, reinterpret_cast<const std::uint8_t*>(parts), sizeof parts);
    return id;
}

}  // namespace

core::RecycledString request_id_for(std::string_view given) {
    if (given.empty() || given.size() > 128) return new_request_id();
    for (char c : given)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return new_request_id();
    return core::RecycledString(given);
}

}  // namespace tokengate::proxy
