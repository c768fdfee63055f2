#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tokengate/core/clock.hpp"

namespace tokengate::config {

/// "250ms", "10s", "5m", "1h", "2d"; a bare number is seconds. Fractions allowed ("1.5s").
std::optional<core::Nanos> parse_duration(std::string_view text);

/// "10/s", "600/min", "1M/day", "0.5/s"; a bare number is per second. Returns units per second.
std::optional<double> parse_rate(std::string_view text);

/// "4MiB", "16KiB", "1MB", "512"; a bare number is bytes.
std::optional<std::uint64_t> parse_size(std::string_view text);

/// A number with an optional metric suffix: "1.5", "2K", "1M", "3G".
std::optional<double> parse_quantity(std::string_view text);

struct HostPort {
    std::string host;
    std::uint16_t port = 0;
};
/// "0.0.0.0:8080", "[::1]:8080", "localhost:80". Port 0 is allowed (the OS picks).
std::optional<HostPort> parse_host_port(std::string_view text);

}  // namespace tokengate::config
