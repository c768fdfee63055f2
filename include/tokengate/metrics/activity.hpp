#pragma once

// The recent past the status page draws (SPEC §15): per tenant, rejections and prompt /
// completion tokens for each of the last 300 seconds and tokens for each of the last 60
// minutes; per upstream, the time to first byte of its last requests. Prometheus keeps the
// long history; this keeps only what a page opened now needs, in fixed rings.

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokengate/core/clock.hpp"

namespace tokengate::metrics {

class Activity {
public:
    static constexpr std::size_t k_seconds = 300;  // the sparklines: five minutes
    static constexpr std::size_t k_minutes = 60;   // the heat map: an hour
    static constexpr std::size_t k_ttfb_samples = 1024;

    /// At most `max_tenants` tenants are followed (a full table forgets the one idle longest).
    explicit Activity(std::size_t max_tenants = 4096, std::size_t max_upstreams = 256);

    /// One finished request, at `unix_now`.
    void request(std::string_view tenant, core::Nanos unix_now, bool rejected, std::uint64_t prompt_tokens,
                 std::uint64_t completion_tokens);
    void first_byte(std::string_view upstream, double seconds);

    struct TenantHistory {
        std::string tenant;
        // Oldest first, the last entry being the current (unfinished) second or minute.
        std::vector<std::uint32_t> rejections, prompt, completion;  // k_seconds each
        std::vector<std::uint64_t> tokens_per_minute;               // k_minutes
        std::uint64_t tokens_last_hour = 0, rejections_last_5m = 0;
    };
    /// Every tenant seen in the last hour.
    std::vector<TenantHistory> tenants(core::Nanos unix_now) const;

    struct Latency {
        std::size_t samples = 0;
        double p50_s = 0, p90_s = 0, p99_s = 0;
    };
    /// Over the upstream's last k_ttfb_samples responses.
    Latency first_byte_latency(std::string_view upstream) const;

private:
    struct Ring {
        std::array<std::int64_t, k_seconds> second{};  // which Unix second each slot holds
        std::array<std::uint32_t, k_seconds> rejections{}, prompt{}, completion{};
        std::array<std::int64_t, k_minutes> minute{};
        std::array<std::uint64_t, k_minutes> tokens{};
        std::int64_t last_second = 0;
    };
    struct Samples {
        std::array<float, k_ttfb_samples> seconds{};
        std::size_t next = 0, count = 0;
    };
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    Ring& ring_for(std::string_view tenant, std::int64_t now_s);

    std::size_t max_tenants_, max_upstreams_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, std::unique_ptr<Ring>, Hash, std::equal_to<>> tenants_;
    std::unordered_map<std::string, Samples, Hash, std::equal_to<>> upstreams_;
};

}  // namespace tokengate::metrics
