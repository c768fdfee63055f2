#include "tokengate/config/units.hpp"

#include <charconv>
#include <cmath>

namespace tokengate::config {
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

/// Splits "12.5ms" into 12.5 and "ms". Rejects signs, empty numbers and NaN/inf.
std::optional<std::pair<double, std::string_view>> split_number(std::string_view s) {
    s = trim(s);
    std::size_t i = 0;
    while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
    if (i == 0) return std::nullopt;
    double value = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + i, value);
    if (ec != std::errc{} || ptr != s.data() + i || !std::isfinite(value)) return std::nullopt;
    return std::pair{value, trim(s.substr(i))};
}

}  // namespace

std::optional<core::Nanos> parse_duration(std::string_view text) {
    auto parts = split_number(text);
    if (!parts) return std::nullopt;
    auto [value, unit] = *parts;
    double seconds_per_unit = 0;
    if (unit.empty() || unit == "s") seconds_per_unit = 1;
    else if (unit == "ms") seconds_per_unit = 1e-3;
    else if (unit == "us") seconds_per_unit = 1e-6;
    else if (unit == "m" || unit == "min") seconds_per_unit = 60;
    else if (unit == "h") seconds_per_unit = 3600;
    else if (unit == "d") seconds_per_unit = 86400;
    else return std::nullopt;
    double nanos = value * seconds_per_unit * static_cast<double>(core::k_nanos_per_second);
    if (nanos > 1e18) return std::nullopt;
    return static_cast<core::Nanos>(std::llround(nanos));
}

std::optional<double> parse_quantity(std::string_view text) {
    auto parts = split_number(text);
    if (!parts) return std::nullopt;
    auto [value, suffix] = *parts;
    if (suffix.empty()) return value;
    if (suffix == "K" || suffix == "k") return value * 1e3;
    if (suffix == "M") return value * 1e6;
    if (suffix == "G") return value * 1e9;
    return std::nullopt;
}

std::optional<double> parse_rate(std::string_view text) {
    auto slash = text.find('/');
    auto amount = parse_quantity(text.substr(0, slash));
    if (!amount) return std::nullopt;
    if (slash == std::string_view::npos) return *amount;
    auto period = trim(text.substr(slash + 1));
    double seconds = 0;
    if (period == "s" || period == "sec" || period == "second") seconds = 1;
    else if (period == "m" || period == "min" || period == "minute") seconds = 60;
    else if (period == "h" || period == "hour") seconds = 3600;
    else if (period == "d" || period == "day") seconds = 86400;
    else if (auto d = parse_duration(period); d && *d > 0)
        seconds = static_cast<double>(*d) / static_cast<double>(core::k_nanos_per_second);
    else return std::nullopt;
    return *amount / seconds;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
    auto parts = split_number(text);
    if (!parts) return std::nullopt;
    auto [value, unit] = *parts;
    double multiplier = 0;
    if (unit.empty() || unit == "B") multiplier = 1;
    else if (unit == "KiB") multiplier = 1024.0;
    else if (unit == "MiB") multiplier = 1024.0 * 1024;
    else if (unit == "GiB") multiplier = 1024.0 * 1024 * 1024;
    else if (unit == "KB" || unit == "kB") multiplier = 1e3;
    else if (unit == "MB") multiplier = 1e6;
    else if (unit == "GB") multiplier = 1e9;
    else return std::nullopt;
    double bytes = value * multiplier;
    if (bytes > 1e15) return std::nullopt;
    return static_cast<std::uint64_t>(bytes);
}

std::optional<HostPort> parse_host_port(std::string_view text) {
    text = trim(text);
    HostPort out;
    std::string_view port_text;
    if (!text.empty() && text.front() == '[') {
        auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') return std::nullopt;
        out.host = std::string(text.substr(1, close - 1));
        port_text = text.substr(close + 2);
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string_view::npos || colon == 0) return std::nullopt;
        out.host = std::string(text.substr(0, colon));
        port_text = text.substr(colon + 1);
    }
    unsigned port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || ptr != port_text.data() + port_text.size() || port > 65535) return std::nullopt;
    out.port = static_cast<std::uint16_t>(port);
    return out;
}

}  // namespace tokengate::config
