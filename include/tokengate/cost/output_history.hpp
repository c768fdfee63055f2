#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tokengate::cost {

/// SPEC §12's learned output estimate: per (tenant, model), the completion tokens per sequence
/// of the last `window` settled requests, and a quantile of them. Thread-safe (one lock per
/// shard). Bounded: at most `max_series` series, the least recently used dropped first, and
/// one byte a sample (a log scale, rounded up, so a sample is never read back lower than it
/// was: at most 4.4% above, and 62,755 tokens at most).
class OutputHistory {
public:
    struct Settings {
        std::uint32_t window = 200;
        double quantile = 0.95;
        std::uint32_t min_samples = 20;
        std::size_t max_series = 100'000;
    };
    struct Estimate {
        std::uint32_t samples = 0;
        std::optional<std::uint64_t> tokens;  // the quantile, once there are min_samples
    };

    /// A model name longer than this is not learned (a client must not make big keys).
    static constexpr std::size_t k_max_model = 256;

    OutputHistory();
    ~OutputHistory();

    void record(std::string_view tenant, std::string_view model, std::uint64_t tokens_per_sequence,
                const Settings& settings);
    Estimate estimate(std::string_view tenant, std::string_view model, const Settings& settings) const;
    std::size_t series() const;

    /// The byte code of a sample, and the least value its code stands for that is not below
    /// any sample with that code (exposed for the tests).
    static std::uint8_t encode(std::uint64_t tokens);
    static std::uint64_t decode(std::uint8_t code);

private:
    struct Series;
    struct Shard;
    static constexpr std::size_t k_shards = 64;
    Shard& shard_for(std::string_view key) const;
    std::unique_ptr<std::array<Shard, k_shards>> shards_;
};

}  // namespace tokengate::cost
