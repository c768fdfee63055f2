#pragma once

#include <cmath>
#include <cstdint>

#include "tokengate/core/clock.hpp"

namespace tokengate::core {

/// The longest duration the limiter reports (about 146 years). A Unix time in nanoseconds plus
/// this still fits an int64, so headers can add it to the wall clock without overflowing.
inline constexpr Nanos k_forever = Nanos{1} << 62;

/// double → integer with the value clamped to [-bound, bound] first: a cast of an out-of-range
/// double is undefined behaviour, and costs, rates and capacities come from clients and YAML.
/// NaN saturates to `bound` (the "never" side of every comparison it feeds).
inline std::int64_t saturate_to_int64(double value, std::int64_t bound = k_forever) {
    double limit = static_cast<double>(bound);
    if (!(value < limit)) return bound;
    if (value <= -limit) return -bound;
    return static_cast<std::int64_t>(std::llround(value));
}

/// SPEC §17: the range of every counter settlement or the admin API moves (quota used and
/// added, a bucket's debt): what the state file's loader accepts, so no client or upstream
/// number can make state unloadable.
inline constexpr double k_max_counter = 1e18;

/// a + b, at most UINT64_MAX: token counts come from clients and upstreams.
inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/// a × b, at most UINT64_MAX: sequences × output per sequence come from clients.
inline std::uint64_t saturating_product(std::uint64_t a, std::uint64_t b) {
    unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
    return p > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(p);
}

/// 128-bit narrowing, saturating at ±bound.
inline std::int64_t narrow_saturated(__int128 value, std::int64_t bound = k_forever) {
    if (value > bound) return bound;
    if (value < -bound) return -bound;
    return static_cast<std::int64_t>(value);
}

}  // namespace tokengate::core
