#pragma once

// Reading another server's Prometheus text exposition (format 0.0.4): what the gateway needs
// from a vLLM, TGI, SGLang or llama.cpp `/metrics` page (SPEC §13), and nothing else kept.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tokengate::metrics {

/// One sample line: the name, the label set as written between the braces (escapes intact),
/// the value (NaN and ±Inf included) and the optional timestamp in milliseconds.
struct Sample {
    std::string_view name;
    std::string_view labels;
    double value = 0;
    std::optional<std::int64_t> timestamp_ms;
};

/// Parses one line. nullopt for a comment, a blank line or a line that is not a well-formed
/// sample (a scrape is read line by line: one bad line costs only itself).
std::optional<Sample> parse_sample(std::string_view line);

/// The value of label `name` in a label set from parse_sample, unescaped; nullopt if absent
/// or malformed.
std::optional<std::string> label_value(std::string_view labels, std::string_view name);

/// The load signals of one upstream, from the series SPEC §13 recognises whatever the server:
/// queue and running summed over their label sets (one per served model), kv_cache the
/// largest (0–1). A series that is absent, or only NaN/±Inf, leaves its signal empty.
struct LoadSignals {
    std::optional<double> queue;
    std::optional<double> running;
    std::optional<double> kv_cache;
    std::size_t lines = 0;      // lines read
    std::size_t malformed = 0;  // lines that were neither comments nor samples
};
LoadSignals read_load_signals(std::string_view exposition);

}  // namespace tokengate::metrics
