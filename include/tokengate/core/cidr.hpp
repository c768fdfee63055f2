#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tokengate::core {

/// An IPv6 address (IPv4 stored v4-mapped), so one type covers both families.
using IpBytes = std::array<std::uint8_t, 16>;

std::optional<IpBytes> parse_ip(std::string_view text);

/// "10.0.0.0/8", "::1/128", or a bare address (a /32 or /128).
struct Cidr {
    IpBytes network{};
    int prefix_bits = 128;

    static std::optional<Cidr> parse(std::string_view text);
    bool contains(const IpBytes& address) const;
};

}  // namespace tokengate::core
