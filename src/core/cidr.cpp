#include "tokengate/core/cidr.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <string>

namespace tokengate::core {

std::optional<IpBytes> parse_ip(std::string_view text) {
    std::string s(text);
    IpBytes out{};
    in_addr v4{};
    if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
        out[10] = 0xff;
        out[11] = 0xff;
        auto* b = reinterpret_cast<const std::uint8_t*>(&v4.s_addr);
        for (int i = 0; i < 4; ++i) out[12 + i] = b[i];
        return out;
    }
    in6_addr v6{};
    if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
        for (int i = 0; i < 16; ++i) out[i] = v6.s6_addr[i];
        return out;
    }
    return std::nullopt;
}

std::optional<Cidr> Cidr::parse(std::string_view text) {
    auto slash = text.find('/');
    auto address = parse_ip(text.substr(0, slash));
    if (!address) return std::nullopt;
    bool is_v4 = text.substr(0, slash).find(':') == std::string_view::npos;
    Cidr cidr;
    cidr.network = *address;
    cidr.prefix_bits = 128;
    if (slash != std::string_view::npos) {
        auto bits_text = text.substr(slash + 1);
        int bits = -1;
        auto [ptr, ec] = std::from_chars(bits_text.data(), bits_text.data() + bits_text.size(), bits);
        if (ec != std::errc{} || ptr != bits_text.data() + bits_text.size()) return std::nullopt;
        int max_bits = is_v4 ? 32 : 128;
        if (bits < 0 || bits > max_bits) return std::nullopt;
        cidr.prefix_bits = is_v4 ? bits + 96 : bits;
    }
    return cidr;
}

bool Cidr::contains(const IpBytes& address) const {
    int full_bytes = prefix_bits / 8;
    for (int i = 0; i < full_bytes; ++i)
        if (network[i] != address[i]) return false;
    int rest = prefix_bits % 8;
    if (rest == 0) return true;
    std::uint8_t mask = static_cast<std::uint8_t>(0xff << (8 - rest));
    return (network[full_bytes] & mask) == (address[full_bytes] & mask);
}

}  // namespace tokengate::core
